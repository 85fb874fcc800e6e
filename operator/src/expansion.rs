//! Kubernetes expands `$(VAR)` in a container's `command` and `args` from the container's
//! environment before the process starts, and turns `$$` into `$`. The sidecar's environment
//! holds the gate's user name and the database user names from Secrets, so user text that went
//! into an argument as it is could copy them into a path, a pattern or a URL (and so into the
//! snapshot, the logs or a request). Every piece of user text the operator puts into an argument
//! goes through [`literal`].

/// `text` escaped so that Kubernetes' expansion yields it unchanged: every `$` doubled.
pub fn literal(text: &str) -> String {
    text.replace('$', "$$")
}

/// What Kubernetes makes of an argument, given the container's environment: `$$` becomes `$`,
/// `$(NAME)` of a defined variable its value, anything else stays as written. (The rules of
/// `k8s.io/kubernetes/third_party/forked/golang/expansion`, for tests of the arguments.)
pub fn expand(arg: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut expanded = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(dollar) = rest.find('$') {
        expanded.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            expanded.push('$');
            rest = tail;
        } else if let Some(reference) = after.strip_prefix('(') {
            match reference.find(')') {
                Some(close) => {
                    let name = &reference[..close];
                    match env(name) {
                        Some(value) => expanded.push_str(&value),
                        None => {
                            expanded.push_str("$(");
                            expanded.push_str(name);
                            expanded.push(')');
                        }
                    }
                    rest = &reference[close + 1..];
                }
                None => {
                    expanded.push_str("$(");
                    rest = reference;
                }
            }
        } else {
            expanded.push('$');
            rest = after;
        }
    }
    expanded.push_str(rest);
    expanded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "NEVERWIPED_GATE_USERNAME").then(|| "shop-backup".to_owned())
    }

    #[test]
    fn expansion_follows_kubernetes() {
        assert_eq!(
            expand("a$(NEVERWIPED_GATE_USERNAME)b", &env),
            "ashop-backupb"
        );
        assert_eq!(expand("$(UNDEFINED)", &env), "$(UNDEFINED)");
        assert_eq!(
            expand("$$(NEVERWIPED_GATE_USERNAME)", &env),
            "$(NEVERWIPED_GATE_USERNAME)"
        );
        assert_eq!(expand("price$5 $$ $(", &env), "price$5 $ $(");
    }

    #[test]
    fn literal_text_survives_expansion_unchanged() {
        for text in [
            "$(NEVERWIPED_GATE_USERNAME)",
            "$$(NEVERWIPED_GATE_USERNAME)",
            "a$b$$c$(",
            "*.log",
            "$",
        ] {
            assert_eq!(expand(&literal(text), &env), text, "{text}");
        }
    }
}
