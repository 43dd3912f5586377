//! Who is asking: bearer tokens mapped to users and groups, as kube-apiserver's static token
//! file (`--token-auth-file`) and the ServiceAccount tokens it issues through the TokenRequest
//! API map them.
//!
//! Why tokens and not client certificates: a test gives the host (or kubectl) an identity by
//! writing one kubeconfig line, and `kubectl create token` works as on a cluster.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;

/// The group whose members bypass authorization (kube-apiserver's superuser group).
pub const MASTERS: &str = "system:masters";
/// Added to every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The one group of a request without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of a request without credentials.
pub const ANONYMOUS: &str = "system:anonymous";

/// A user and its groups, as authorization sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    /// The token file's uid column, a ServiceAccount's `metadata.uid`; "" when none.
    pub uid: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with `groups` plus `system:authenticated`.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups,
        }
    }

    /// The same user with `uid` (what `kubectl auth whoami` shows).
    pub fn with_uid(mut self, uid: &str) -> Self {
        uid.clone_into(&mut self.uid);
        self
    }

    /// The user of a request that carries no token.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// The user a ServiceAccount's token authenticates as.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo::new(
            &format!("system:serviceaccount:{namespace}:{name}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{namespace}"),
            ],
        )
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    pub fn is_authenticated(&self) -> bool {
        self.in_group(AUTHENTICATED)
    }
}

/// A line of a token file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {why}")]
pub struct TokenFileError {
    /// One-based line number.
    pub line: usize,
    pub why: &'static str,
}

/// Parses kube-apiserver's token file: one `token,user,uid[,"group1,group2"]` per line; blank
/// lines and lines starting with `#` are skipped.
pub fn parse_token_file(text: &str) -> Result<Vec<(String, UserInfo)>, TokenFileError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |why| TokenFileError { line: i + 1, why };
        let fields = csv_fields(line).ok_or_else(|| err("unbalanced quotes"))?;
        let [token, user, uid, rest @ ..] = fields.as_slice() else {
            return Err(err("expected token,user,uid[,\"groups\"]"));
        };
        if token.is_empty() || user.is_empty() {
            return Err(err("empty token or user"));
        }
        let groups: Vec<&str> = rest
            .first()
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        out.push((token.clone(), UserInfo::new(user, &groups).with_uid(uid)));
    }
    Ok(out)
}

/// The fields of one CSV line (double quotes group commas); `None` for an open quote.
fn csv_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (!quoted).then(|| fields.into_iter().map(|f| f.trim().to_owned()).collect())
}

struct Entry {
    user: UserInfo,
    expires: Option<SystemTime>,
}

/// The tokens the emulator accepts. A request with an unknown (or expired) token is 401; one
/// without a token is anonymous.
#[derive(Default)]
pub struct Tokens {
    map: RwLock<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("count", &self.map.read().len())
            .finish()
    }
}

impl Tokens {
    /// Accept `token` as `user` from now on.
    pub fn add(&self, token: &str, user: UserInfo) {
        self.map.write().insert(
            token.to_owned(),
            Entry {
                user,
                expires: None,
            },
        );
    }

    /// A new random token for `user`, valid for `ttl`.
    pub fn issue(&self, user: UserInfo, ttl: Duration) -> String {
        let token = format!("emulator.{}", super::util::new_uid().replace('-', ""));
        self.map.write().insert(
            token.clone(),
            Entry {
                user,
                expires: SystemTime::now().checked_add(ttl),
            },
        );
        token
    }

    /// The user of an `Authorization` header value, as kube-apiserver's bearer-token
    /// authenticator with anonymous access decides: a header that is absent, not `Bearer`
    /// (any case) or carries an empty token is anonymous; a token that is unknown or expired is
    /// `None` (the server answers 401 then).
    pub fn authenticate(&self, authorization: Option<&str>) -> Option<UserInfo> {
        let Some(token) = authorization.and_then(bearer_token) else {
            return Some(UserInfo::anonymous());
        };
        let map = self.map.read();
        let e = map.get(token)?;
        match e.expires {
            Some(t) if t <= SystemTime::now() => None,
            _ => Some(e.user.clone()),
        }
    }
}

/// The token of a `Bearer <token>` header value; `None` when the scheme is another or the
/// token is empty.
fn bearer_token(value: &str) -> Option<&str> {
    let mut parts = value.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lines_map_to_users_and_groups() {
        let text = "# comment\n\nt1,alice,1\nt2,bob,2,\"dev,ops\"\nt3, carol ,3,system:masters\n";
        let users = parse_token_file(text).expect("parses");
        assert_eq!(users.len(), 3);
        assert_eq!(users[0].0, "t1");
        assert_eq!(users[0].1, UserInfo::new("alice", &[]).with_uid("1"));
        assert_eq!(users[1].1.groups, ["dev", "ops", AUTHENTICATED]);
        assert_eq!(
            (users[1].1.name.as_str(), users[1].1.uid.as_str()),
            ("bob", "2")
        );
        assert_eq!(users[2].1.name, "carol");
        assert!(users[2].1.in_group(MASTERS));
        assert_eq!(
            parse_token_file("x,y\n"),
            Err(TokenFileError {
                line: 1,
                why: "expected token,user,uid[,\"groups\"]"
            })
        );
        assert_eq!(
            parse_token_file("a,b,c,\"open\n").map_err(|e| e.to_string()),
            Err("line 1: unbalanced quotes".to_string())
        );
    }

    #[test]
    fn unknown_and_expired_tokens_fail_and_no_token_is_anonymous() {
        let t = Tokens::default();
        t.add("good", UserInfo::new("alice", &[]));
        assert_eq!(
            t.authenticate(Some("Bearer good")).map(|u| u.name),
            Some("alice".into())
        );
        assert_eq!(
            t.authenticate(Some("bearer good")).map(|u| u.name),
            Some("alice".into()),
            "the scheme is case-insensitive"
        );
        assert_eq!(t.authenticate(Some("Bearer bad")), None);
        let anon = t.authenticate(None).expect("anonymous");
        assert_eq!(anon.name, ANONYMOUS);
        assert!(!anon.is_authenticated());
        // Not bearer credentials at all: anonymous, as the real server treats them.
        for other in ["Basic eDp5", "Bearer", "Bearer  good", ""] {
            assert_eq!(
                t.authenticate(Some(other)),
                Some(UserInfo::anonymous()),
                "{other:?}"
            );
        }
        let sa = t.issue(
            UserInfo::service_account("ns", "sa"),
            Duration::from_secs(60),
        );
        let u = t
            .authenticate(Some(&format!("Bearer {sa}")))
            .expect("issued");
        assert_eq!(u.name, "system:serviceaccount:ns:sa");
        assert!(u.in_group("system:serviceaccounts:ns") && u.is_authenticated());
        let gone = t.issue(UserInfo::new("x", &[]), Duration::ZERO);
        assert_eq!(t.authenticate(Some(&format!("Bearer {gone}"))), None);
    }
}
