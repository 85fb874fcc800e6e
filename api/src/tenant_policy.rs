//! The cluster admin's limits on what BackupPlans and Restores may ask for: which repository URLs
//! backups may be sent to, and which tolerations, node selectors and priority classes their pods
//! may use, and where their pods may read volumes as root. Set in the chart's `policy` values,
//! passed to the operator as JSON in [`POLICY_ENV`]; a limit left out allows anything, except
//! privileged movers, which are allowed nowhere unless listed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use neverwiped_contract::location::RestLocation;
use serde::Deserialize;

/// The environment variable holding the policy as JSON (the chart's `policy` values).
pub const POLICY_ENV: &str = "NEVERWIPED_TENANT_POLICY";

/// A limit: anything (the value was left out), or only what is listed (an empty list allows
/// nothing).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "Option<T>")]
pub enum Allowed<T> {
    #[default]
    Any,
    Only(T),
}

impl<T> From<Option<T>> for Allowed<T> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Allowed::Any, Allowed::Only)
    }
}

/// What tenants' plans and Restores may use.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantPolicy {
    /// URL prefixes a repository URL must start with, e.g. `https://gate.example.com/`. A prefix
    /// matches only up to a `/`: `https://gate.example.com` does not allow
    /// `https://gate.example.com.evil.test/`. Each is parsed as a repository URL, and compared
    /// with the parsed URL (scheme, host and port, then whole path segments).
    #[serde(default)]
    pub allowed_repository_prefixes: Allowed<Vec<RestLocation>>,
    /// Tolerations a pod may have: each of the pod's must match one rule.
    #[serde(default)]
    pub allowed_tolerations: Allowed<Vec<TolerationRule>>,
    /// Node labels a pod's node selector may name, each with the values it may take (an empty
    /// list: any value).
    #[serde(default)]
    pub allowed_node_selectors: Allowed<BTreeMap<String, Vec<String>>>,
    /// PriorityClasses a pod may use.
    #[serde(default)]
    pub allowed_priority_classes: Allowed<Vec<String>>,
    /// Namespaces whose plans and Restores may run their volume pods as root with file
    /// capabilities (`spec.mover.mode: Privileged`); `"*"` allows every namespace. Empty (the
    /// default): none, so a tenant never gets a root pod by a field it sets alone.
    #[serde(default)]
    pub privileged_mover_namespaces: Vec<String>,
    /// Database hosts Restores may write to, by namespace (`"*"`: every namespace); a host is
    /// allowed when it equals an entry or, for an entry `*.example.svc`, ends with `.example.svc`.
    /// A namespace the map leaves out may restore to no host.
    #[serde(default)]
    pub allowed_restore_database_hosts: Allowed<BTreeMap<String, Vec<String>>>,
    /// Clones: which namespaces' snapshots Restores of another namespace may read (a Restore
    /// whose `spec.origin` is in its own namespace needs no rule). Empty (the default): none.
    #[serde(default)]
    pub allowed_restore_origins: Vec<CloneRule>,
    /// Images the stream and hook containers of a namespace's plans and Restores may run, by
    /// namespace (`"*"`: every namespace), as prefixes ([`image_matches`]). A namespace the map
    /// leaves out may use no image; hooks without an image run the sidecar's, always allowed.
    #[serde(default)]
    pub allowed_images: Allowed<BTreeMap<String, Vec<String>>>,
}

/// One clone the cluster admin allows: Restores in namespace `to` may restore the snapshots that
/// plans of namespace `from` took, from the repositories under `repositoryPrefixes` (left out:
/// from any repository the Restore may use).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloneRule {
    /// The origin's namespace, or `"*"`: any.
    pub from: String,
    /// The Restore's namespace, or `"*"`: any.
    pub to: String,
    /// Repository URLs the clone may read from, each parsed and compared as
    /// `allowedRepositoryPrefixes` are.
    #[serde(default)]
    pub repository_prefixes: Allowed<Vec<RestLocation>>,
}

impl CloneRule {
    /// Whether this rule lets a Restore in `to` read the snapshots of namespace `from` in the
    /// repository at `location`.
    pub fn allows(&self, from: &str, to: &str, location: &RestLocation) -> bool {
        let names = |rule: &str, namespace: &str| rule == "*" || rule == namespace;
        let under = match &self.repository_prefixes {
            Allowed::Any => true,
            Allowed::Only(prefixes) => prefixes.iter().any(|prefix| location.is_under(prefix)),
        };
        names(&self.from, from) && names(&self.to, to) && under
    }
}

/// One allowed toleration: every field set must equal the pod toleration's; a field left out
/// matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TolerationRule {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<String>,
}

/// The policy could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{POLICY_ENV} is not a valid tenant policy: {0}")]
pub struct PolicyError(#[from] serde_json::Error);

impl TenantPolicy {
    /// Reads the policy from its JSON; an empty text is the policy that allows anything.
    pub fn from_json(text: &str) -> Result<TenantPolicy, PolicyError> {
        if text.trim().is_empty() {
            return Ok(TenantPolicy::default());
        }
        Ok(serde_json::from_str(text)?)
    }

    /// Whether backups may be sent to `url`; a URL that is no repository URL is never allowed.
    pub fn allows_repository(&self, url: &str) -> bool {
        RestLocation::parse(url).is_ok_and(|location| self.allows_location(&location))
    }

    /// Whether backups may be sent to `location`.
    pub fn allows_location(&self, location: &RestLocation) -> bool {
        match &self.allowed_repository_prefixes {
            Allowed::Any => true,
            Allowed::Only(prefixes) => prefixes.iter().any(|prefix| location.is_under(prefix)),
        }
    }

    /// Whether a pod may have `toleration`.
    pub fn allows_toleration(&self, toleration: &Toleration) -> bool {
        match &self.allowed_tolerations {
            Allowed::Any => true,
            Allowed::Only(rules) => rules.iter().any(|rule| rule.matches(toleration)),
        }
    }

    /// Whether a pod's node selector may require label `key` to be `value`.
    pub fn allows_node_selector(&self, key: &str, value: &str) -> bool {
        match &self.allowed_node_selectors {
            Allowed::Any => true,
            Allowed::Only(keys) => keys
                .get(key)
                .is_some_and(|values| values.is_empty() || values.iter().any(|v| v == value)),
        }
    }

    /// Whether a Restore in `namespace` may write to the database at `host`.
    pub fn allows_restore_database_host(&self, namespace: &str, host: &str) -> bool {
        let Allowed::Only(by_namespace) = &self.allowed_restore_database_hosts else {
            return true;
        };
        let host = host.to_ascii_lowercase();
        [namespace, "*"]
            .iter()
            .filter_map(|key| by_namespace.get(*key))
            .flatten()
            .any(|allowed| host_matches(&host, &allowed.to_ascii_lowercase()))
    }

    /// Whether a pod may use PriorityClass `name`.
    pub fn allows_priority_class(&self, name: &str) -> bool {
        match &self.allowed_priority_classes {
            Allowed::Any => true,
            Allowed::Only(names) => names.iter().any(|allowed| allowed == name),
        }
    }
}

impl TenantPolicy {
    /// Whether a Restore in namespace `to` may restore snapshots that a plan of namespace `from`
    /// took, from the repository at `location`: always within one namespace, else by a rule.
    pub fn allows_restore_origin(&self, from: &str, to: &str, location: &RestLocation) -> bool {
        from == to
            || self
                .allowed_restore_origins
                .iter()
                .any(|rule| rule.allows(from, to, location))
    }

    /// Whether a stream or hook container of `namespace` may run `image`.
    pub fn allows_image(&self, namespace: &str, image: &str) -> bool {
        match self.allowed_image_prefixes(namespace) {
            None => true,
            Some(prefixes) => prefixes.iter().any(|prefix| image_matches(image, prefix)),
        }
    }

    /// The image prefixes `namespace` may use (its own and `"*"`'s); `None`: any image.
    pub fn allowed_image_prefixes(&self, namespace: &str) -> Option<Vec<&str>> {
        let Allowed::Only(by_namespace) = &self.allowed_images else {
            return None;
        };
        let prefixes = [namespace, "*"]
            .iter()
            .filter_map(|key| by_namespace.get(*key))
            .flatten()
            .map(String::as_str)
            .collect();
        Some(prefixes)
    }

    /// Whether pods of `namespace` may read and write volumes as root.
    pub fn allows_privileged_mover(&self, namespace: &str) -> bool {
        self.privileged_mover_namespaces
            .iter()
            .any(|allowed| allowed == "*" || allowed == namespace)
    }
}

impl TolerationRule {
    fn matches(&self, toleration: &Toleration) -> bool {
        // Kubernetes reads a toleration without an operator as `Equal`.
        let operator = toleration.operator.as_deref().unwrap_or("Equal");
        let field_matches = |rule: &Option<String>, actual: Option<&str>| {
            rule.as_deref()
                .is_none_or(|wanted| wanted == actual.unwrap_or_default())
        };
        field_matches(&self.key, toleration.key.as_deref())
            && field_matches(&self.operator, Some(operator))
            && field_matches(&self.value, toleration.value.as_deref())
            && field_matches(&self.effect, toleration.effect.as_deref())
    }
}

/// Whether `prefix` allows `image`: equal, or a prefix that ends with `/`, or one the image goes
/// on from with `/`, `:` or `@` — so `registry.example/redis` allows `registry.example/redis:7`
/// and `registry.example/redis/tools`, never `registry.example/redis-evil`.
pub fn image_matches(image: &str, prefix: &str) -> bool {
    if prefix.is_empty() {
        return false;
    }
    match image.strip_prefix(prefix) {
        None => false,
        Some("") => true,
        Some(rest) => prefix.ends_with('/') || rest.starts_with(['/', ':', '@']),
    }
}

/// `host` equals `pattern`, or `pattern` is `*.SUFFIX` and `host` is a name under `SUFFIX`.
fn host_matches(host: &str, pattern: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        None => host == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_database_hosts_are_limited_per_namespace() {
        let open = policy("{}");
        assert!(open.allows_restore_database_host("shop", "attacker.example"));
        let limited = policy(
            r#"{"allowedRestoreDatabaseHosts": {"shop": ["postgres.shop.svc", "*.db.shop.svc"],
                                               "*": ["shared-mariadb.infra.svc"]}}"#,
        );
        assert!(limited.allows_restore_database_host("shop", "postgres.shop.svc"));
        assert!(limited.allows_restore_database_host("shop", "Postgres.Shop.svc"));
        assert!(limited.allows_restore_database_host("shop", "orders.db.shop.svc"));
        assert!(limited.allows_restore_database_host("blog", "shared-mariadb.infra.svc"));
        for (namespace, host) in [
            ("shop", "attacker.example"),
            ("shop", "db.shop.svc"),
            ("shop", "evil-db.shop.svc"),
            ("shop", "x.db.shop.svc.attacker.example"),
            ("blog", "postgres.shop.svc"),
        ] {
            assert!(
                !limited.allows_restore_database_host(namespace, host),
                "{namespace}: {host}"
            );
        }
    }

    fn policy(json: &str) -> TenantPolicy {
        TenantPolicy::from_json(json).unwrap()
    }

    #[test]
    fn an_empty_policy_allows_anything() {
        let any = policy("");
        assert_eq!(any, TenantPolicy::default());
        assert!(any.allows_repository("https://anywhere.example/"));
        assert!(any.allows_priority_class("system-node-critical"));
        assert!(any.allows_node_selector("node-role.kubernetes.io/control-plane", ""));
        assert!(any.allows_toleration(&Toleration {
            operator: Some("Exists".into()),
            ..Toleration::default()
        }));
        assert_eq!(policy("{}"), any);
        assert_eq!(policy(r#"{"allowedTolerations": null}"#), any);
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        let none = policy(
            r#"{"allowedRepositoryPrefixes": [], "allowedTolerations": [],
                "allowedNodeSelectors": {}, "allowedPriorityClasses": []}"#,
        );
        assert!(!none.allows_repository("https://gate.example.com/shop"));
        assert!(!none.allows_priority_class("low"));
        assert!(!none.allows_node_selector("pool", "backup"));
        assert!(!none.allows_toleration(&Toleration::default()));
    }

    #[test]
    fn repository_prefixes_match_only_up_to_a_slash() {
        let gate = policy(
            r#"{"allowedRepositoryPrefixes": ["https://gate.example.com", "https://b.example/team-a/"]}"#,
        );
        assert!(gate.allows_repository("https://gate.example.com/shop"));
        assert!(gate.allows_repository("https://gate.example.com"));
        assert!(!gate.allows_repository("https://gate.example.com.evil.test/shop"));
        assert!(!gate.allows_repository("https://gate.example.com:8443/shop"));
        assert!(gate.allows_repository("https://b.example/team-a/shop"));
        assert!(!gate.allows_repository("https://b.example/team-ab/shop"));
        assert!(!gate.allows_repository("http://gate.example.com/shop"));
    }

    #[test]
    fn repository_prefixes_are_compared_parsed_and_a_prefix_that_is_no_url_is_refused() {
        let gate =
            policy(r#"{"allowedRepositoryPrefixes": ["https://Gate.Example.com:443/team-a"]}"#);
        assert!(gate.allows_repository("https://gate.example.com/team-a/shop"));
        assert!(!gate.allows_repository("https://gate.example.com/team-a/../team-b"));
        assert!(!gate.allows_repository("https://user@gate.example.com/team-a/shop"));
        let error =
            TenantPolicy::from_json(r#"{"allowedRepositoryPrefixes": ["gate.example.com"]}"#)
                .unwrap_err()
                .to_string();
        assert!(
            error.contains("the scheme must be http or https"),
            "{error}"
        );
    }

    #[test]
    fn tolerations_must_match_a_rule_field_by_field() {
        let rules = policy(
            r#"{"allowedTolerations": [{"key": "dedicated", "value": "backup"},
                                       {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}"#,
        );
        let toleration = |key: &str,
                          operator: Option<&str>,
                          value: Option<&str>,
                          effect: Option<&str>| Toleration {
            key: Some(key.into()),
            operator: operator.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        };
        assert!(rules.allows_toleration(&toleration("dedicated", None, Some("backup"), None)));
        assert!(rules.allows_toleration(&toleration(
            "dedicated",
            Some("Equal"),
            Some("backup"),
            Some("NoExecute")
        )));
        assert!(!rules.allows_toleration(&toleration("dedicated", None, Some("db"), None)));
        assert!(rules.allows_toleration(&toleration(
            "spot",
            Some("Exists"),
            None,
            Some("NoSchedule")
        )));
        assert!(!rules.allows_toleration(&toleration("spot", Some("Exists"), None, None)));
        // Tolerating every taint (no key, `Exists`) matches no rule that names a key.
        assert!(!rules.allows_toleration(&Toleration {
            operator: Some("Exists".into()),
            ..Toleration::default()
        }));
        assert!(!rules.allows_toleration(&toleration(
            "node-role.kubernetes.io/control-plane",
            Some("Exists"),
            None,
            None
        )));
    }

    #[test]
    fn node_selectors_and_priority_classes_are_allowed_by_name() {
        let limits = policy(
            r#"{"allowedNodeSelectors": {"pool": ["backup", "general"], "kubernetes.io/os": []},
                "allowedPriorityClasses": ["backup-low"]}"#,
        );
        assert!(limits.allows_node_selector("pool", "backup"));
        assert!(!limits.allows_node_selector("pool", "control"));
        assert!(limits.allows_node_selector("kubernetes.io/os", "linux"));
        assert!(!limits.allows_node_selector("node-role.kubernetes.io/control-plane", ""));
        assert!(limits.allows_priority_class("backup-low"));
        assert!(!limits.allows_priority_class("system-cluster-critical"));
    }

    #[test]
    fn privileged_movers_are_allowed_only_where_listed() {
        assert!(!policy("").allows_privileged_mover("shop"));
        let listed = policy(r#"{"privilegedMoverNamespaces": ["backup-admin", "shop"]}"#);
        assert!(listed.allows_privileged_mover("shop"));
        assert!(!listed.allows_privileged_mover("shop2"));
        assert!(!listed.allows_privileged_mover("*"));
        let all = policy(r#"{"privilegedMoverNamespaces": ["*"]}"#);
        assert!(all.allows_privileged_mover("anything"));
    }

    #[test]
    fn clones_need_a_rule_for_the_pair_of_namespaces_and_the_repository() {
        let location = |url: &str| RestLocation::parse(url).unwrap();
        let shop = location("https://gate.example.com/shop/app");
        let other = location("https://gate.example.com/other/app");
        let none = policy("{}");
        assert!(none.allows_restore_origin("shop", "shop", &shop));
        assert!(!none.allows_restore_origin("shop", "staging", &shop));
        let rules = policy(
            r#"{"allowedRestoreOrigins": [
                {"from": "shop", "to": "staging"},
                {"from": "*", "to": "recovery", "repositoryPrefixes": ["https://gate.example.com/shop"]}]}"#,
        );
        assert!(rules.allows_restore_origin("shop", "staging", &other));
        assert!(!rules.allows_restore_origin("staging", "shop", &shop));
        assert!(rules.allows_restore_origin("blog", "recovery", &shop));
        assert!(!rules.allows_restore_origin("blog", "recovery", &other));
        let outside = location("https://gate.example.com/shop-2/app");
        assert!(!rules.allows_restore_origin("blog", "recovery", &outside));
        let error = TenantPolicy::from_json(r#"{"allowedRestoreOrigins": [{"from": "a"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing field `to`"), "{error}");
    }

    #[test]
    fn an_image_prefix_matches_only_up_to_a_separator() {
        for (image, prefix) in [
            ("registry.example/redis", "registry.example/redis"),
            ("registry.example/redis:7.2", "registry.example/redis"),
            (
                "registry.example/redis@sha256:ab12",
                "registry.example/redis",
            ),
            ("registry.example/redis/tools:1", "registry.example/redis"),
            ("registry.example/anything:1", "registry.example/"),
        ] {
            assert!(image_matches(image, prefix), "{prefix} allows {image}");
        }
        for (image, prefix) in [
            ("registry.example/redis-evil", "registry.example/redis"),
            ("registry.example/redis-evil:7", "registry.example/redis"),
            ("registry.example.evil/redis", "registry.example"),
            ("registry.example/redi", "registry.example/redis"),
            ("anything", ""),
        ] {
            assert!(!image_matches(image, prefix), "{prefix} refuses {image}");
        }
    }

    #[test]
    fn images_are_limited_per_namespace_and_a_namespace_left_out_may_use_none() {
        assert!(policy("{}").allows_image("shop", "docker.io/library/redis:7"));
        assert_eq!(policy("{}").allowed_image_prefixes("shop"), None);
        let limited = policy(
            r#"{"allowedImages": {"shop": ["registry.example/redis"], "*": ["registry.example/tools/"]}}"#,
        );
        assert!(limited.allows_image("shop", "registry.example/redis:7"));
        assert!(limited.allows_image("shop", "registry.example/tools/mongo:6"));
        assert!(limited.allows_image("blog", "registry.example/tools/mongo:6"));
        assert!(!limited.allows_image("blog", "registry.example/redis:7"));
        assert!(!limited.allows_image("shop", "registry.example/redis-evil:7"));
        let only_shop = policy(r#"{"allowedImages": {"shop": ["registry.example/redis"]}}"#);
        assert!(!only_shop.allows_image("blog", "registry.example/redis"));
        assert_eq!(only_shop.allowed_image_prefixes("blog"), Some(Vec::new()));
    }

    #[test]
    fn a_misspelt_limit_is_an_error_not_a_policy_that_allows_anything() {
        let error = TenantPolicy::from_json(r#"{"allowedTolerationz": []}"#).unwrap_err();
        assert!(error.to_string().contains("allowedTolerationz"), "{error}");
    }
}
