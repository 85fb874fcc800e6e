//! Types both kinds use: references to Secrets, database engines, pod settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::names::DNS_SUBDOMAIN_PATTERN;

/// One key of a Secret in the same namespace as the resource.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Key of the value within the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// A Secret in the same namespace holding a user name and a password, as in a Secret of type
/// `kubernetes.io/basic-auth`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Key of the user name within the Secret.
    #[serde(default = "default_username_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub username_key: String,
    /// Key of the password within the Secret.
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub password_key: String,
}

fn default_username_key() -> String {
    "username".into()
}

fn default_password_key() -> String {
    "password".into()
}

impl CredentialsSecretRef {
    /// A reference with the default keys `username` and `password`.
    pub fn new(name: impl Into<String>) -> CredentialsSecretRef {
        CredentialsSecretRef {
            name: name.into(),
            username_key: default_username_key(),
            password_key: default_password_key(),
        }
    }
}

/// The database server's engine, which chooses the dump and restore tools.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseType {
    /// PostgreSQL, dumped with `pg_dumpall` (all databases, roles included) or `pg_dump`.
    Postgresql,
    /// MariaDB, dumped with `mariadb-dump --single-transaction`.
    Mariadb,
    /// MySQL, dumped with `mariadb-dump --single-transaction`.
    Mysql,
}

impl DatabaseType {
    /// The scheme of the sidecar's `--database NAME=URI`.
    pub fn uri_scheme(self) -> &'static str {
        match self {
            DatabaseType::Postgresql => "postgresql",
            DatabaseType::Mariadb => "mariadb",
            DatabaseType::Mysql => "mysql",
        }
    }

    /// The engine a snapshot recorded (the scheme of its `--database` URI).
    pub fn from_uri_scheme(scheme: &str) -> Option<DatabaseType> {
        [
            DatabaseType::Postgresql,
            DatabaseType::Mariadb,
            DatabaseType::Mysql,
        ]
        .into_iter()
        .find(|engine| engine.uri_scheme() == scheme)
    }

    /// The engine's usual port, used when a database does not name one.
    pub fn default_port(self) -> u16 {
        match self {
            DatabaseType::Postgresql => 5432,
            DatabaseType::Mariadb | DatabaseType::Mysql => 3306,
        }
    }
}

/// Settings for the pod of every Job the operator runs for a resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSettings {
    /// Labels a node must have to run the Job's pod. In `Direct` mode the pod is also pinned to
    /// the node where the volumes are in use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the Job's pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// CPU and memory requests and limits of the sidecar container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// PriorityClass of the Job's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
}
