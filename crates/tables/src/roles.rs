//! Roles, object owners and privileges as the catalog holds them.
//!
//! They are schema records in the log like tables and views
//! (`docs/table-records.md`), so they are replayed at start and survive
//! restarts. A role's password is kept only as a SCRAM-SHA-256 verifier
//! (PostgreSQL's `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`):
//! it proves a client knows the password without being one.
//!
//! Decisions (is this role allowed this privilege on this object?) are made
//! here on typed values; the SQL layer adds superusers and views.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{Catalog, SchemaChange, TableId};

/// PBKDF2 iterations of a verifier made from a password (PostgreSQL's default).
pub const SCRAM_ITERATIONS: u32 = 4096;
/// Salt bytes of a verifier made from a password (as PostgreSQL).
pub const SCRAM_SALT_BYTES: usize = 16;
/// Fewest iterations a verifier given as text may have (RFC 7677's minimum).
pub const MIN_SCRAM_ITERATIONS: u32 = 4096;
/// Most iterations a verifier given as text may have: a login costs this
/// many HMACs, so an absurd count would be a way to burn the server's CPU.
pub const MAX_SCRAM_ITERATIONS: u32 = 1_000_000;
/// Longest role name (PostgreSQL's identifier limit).
pub const MAX_ROLE_NAME_BYTES: usize = 63;

/// A privilege on a table or view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
}

impl Privilege {
    /// Every privilege, as `ALL [PRIVILEGES]` means.
    pub const ALL: [Privilege; 4] = [
        Privilege::Select,
        Privilege::Insert,
        Privilege::Update,
        Privilege::Delete,
    ];

    fn bit(self) -> u8 {
        match self {
            Privilege::Select => 1,
            Privilege::Insert => 2,
            Privilege::Update => 4,
            Privilege::Delete => 8,
        }
    }

    pub fn as_sql(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_sql())
    }
}

/// A set of privileges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Privileges(u8);

impl Privileges {
    pub fn of(list: &[Privilege]) -> Privileges {
        Privileges(list.iter().fold(0, |acc, p| acc | p.bit()))
    }

    pub fn contains(self, p: Privilege) -> bool {
        self.0 & p.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Privileges) -> Privileges {
        Privileges(self.0 | other.0)
    }

    pub fn minus(self, other: Privileges) -> Privileges {
        Privileges(self.0 & !other.0)
    }

    pub fn list(self) -> Vec<Privilege> {
        Privilege::ALL
            .into_iter()
            .filter(|p| self.contains(*p))
            .collect()
    }
}

/// Who a privilege is granted to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grantee {
    /// Every role, present and future.
    Public,
    Role(String),
}

impl fmt::Display for Grantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grantee::Public => f.write_str("PUBLIC"),
            Grantee::Role(r) => f.write_str(r),
        }
    }
}

/// An object's owner and the privileges granted on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    /// `None` for objects created before owners were recorded: only
    /// superusers own them.
    pub owner: Option<String>,
    pub grants: BTreeMap<Grantee, Privileges>,
}

/// A SCRAM-SHA-256 verifier: what the server keeps of a password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    /// `SHA-256(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keys stay out of logs.
        f.debug_struct("ScramVerifier")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramVerifier {
    /// The verifier of `password` with a fresh random salt.
    pub fn from_password(password: &str) -> ScramVerifier {
        use ring::rand::SecureRandom;
        let mut salt = [0u8; SCRAM_SALT_BYTES];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .expect("the system's random number generator works");
        ScramVerifier::derive(password, &salt, SCRAM_ITERATIONS)
    }

    /// The verifier of `password` with `salt` and `iterations`.
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        let mut salted = [0u8; 32];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            NonZeroU32::new(iterations.max(1)).expect("not zero"),
            salt,
            password.as_bytes(),
            &mut salted,
        );
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &salted);
        let client_key = ring::hmac::sign(&key, b"Client Key");
        let stored_key = ring::digest::digest(&ring::digest::SHA256, client_key.as_ref());
        let server_key = ring::hmac::sign(&key, b"Server Key");
        ScramVerifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: stored_key.as_ref().to_vec(),
            server_key: server_key.as_ref().to_vec(),
        }
    }

    /// Whether `password` is the one this verifier was made from.
    pub fn verify(&self, password: &str) -> bool {
        let other = ScramVerifier::derive(password, &self.salt, self.iterations);
        // Compared without an early exit, so timing tells nothing.
        other.stored_key.len() == self.stored_key.len()
            && other
                .stored_key
                .iter()
                .zip(&self.stored_key)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// Parses PostgreSQL's text form
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Option<ScramVerifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok()?;
        if !(MIN_SCRAM_ITERATIONS..=MAX_SCRAM_ITERATIONS).contains(&iterations) {
            return None;
        }
        let salt = B64.decode(salt).ok()?;
        let stored_key = B64.decode(stored).ok()?;
        let server_key = B64.decode(server).ok()?;
        if salt.is_empty() || stored_key.len() != 32 || server_key.len() != 32 {
            return None;
        }
        Some(ScramVerifier {
            iterations,
            salt,
            stored_key,
            server_key,
        })
    }
}

impl fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key)
        )
    }
}

/// A role created in SQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleDef {
    /// From the table-id counter (the key of its records).
    pub id: TableId,
    pub name: String,
    /// May log in (`LOGIN`; `CREATE USER` gives it).
    pub login: bool,
    pub superuser: bool,
    /// May create, alter and drop roles that are not superusers.
    pub createrole: bool,
    pub password: Option<ScramVerifier>,
}

/// A role as written in its schema record.
#[derive(Serialize, Deserialize)]
pub(crate) struct RoleJson {
    id: TableId,
    name: String,
    login: bool,
    superuser: bool,
    #[serde(default)]
    createrole: bool,
    /// The verifier's text form; never a password.
    #[serde(default)]
    password: Option<String>,
}

impl RoleJson {
    pub(crate) fn from_def(r: &RoleDef) -> RoleJson {
        RoleJson {
            id: r.id,
            name: r.name.clone(),
            login: r.login,
            superuser: r.superuser,
            createrole: r.createrole,
            password: r.password.as_ref().map(|p| p.to_string()),
        }
    }

    pub(crate) fn into_def(self) -> Result<RoleDef, String> {
        let password = match self.password {
            None => None,
            Some(p) => Some(ScramVerifier::parse(&p).ok_or_else(|| {
                format!("role \"{}\" has a malformed password verifier", self.name)
            })?),
        };
        Ok(RoleDef {
            id: self.id,
            name: self.name,
            login: self.login,
            superuser: self.superuser,
            createrole: self.createrole,
            password,
        })
    }
}

/// A grantee as written in a schema record: a role name, or none for PUBLIC.
pub(crate) fn grantee_json(g: &Grantee) -> Option<String> {
    match g {
        Grantee::Public => None,
        Grantee::Role(r) => Some(r.clone()),
    }
}

pub(crate) fn grantee_def(g: Option<String>) -> Grantee {
    match g {
        None => Grantee::Public,
        Some(r) => Grantee::Role(r),
    }
}

/// The security part of the catalog.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// Roles created in SQL, by name.
    pub roles: BTreeMap<String, RoleDef>,
    /// Owner and grants per table or view id.
    pub acls: BTreeMap<TableId, Acl>,
}

impl Catalog {
    /// A role created in SQL.
    pub fn role(&self, name: &str) -> Option<&RoleDef> {
        self.security.roles.get(name)
    }

    /// The owner and grants of a table or view.
    pub fn acl(&self, object: TableId) -> Option<&Acl> {
        self.security.acls.get(&object)
    }

    /// The owner recorded for a table or view.
    pub fn owner(&self, object: TableId) -> Option<&str> {
        self.acl(object).and_then(|a| a.owner.as_deref())
    }

    /// Whether `role` owns `object`.
    pub fn is_owner(&self, role: &str, object: TableId) -> bool {
        self.owner(object) == Some(role)
    }

    /// Whether `role` holds `privilege` on `object` as its owner, by a
    /// grant to it, or by a grant to PUBLIC. Superusers are the caller's
    /// business.
    pub fn has_privilege(&self, role: &str, object: TableId, privilege: Privilege) -> bool {
        let Some(acl) = self.acl(object) else {
            return false;
        };
        if acl.owner.as_deref() == Some(role) {
            return true;
        }
        [Grantee::Public, Grantee::Role(role.to_string())]
            .iter()
            .any(|g| acl.grants.get(g).is_some_and(|p| p.contains(privilege)))
    }

    /// The tables and views `role` owns, by name.
    pub fn owned_by(&self, role: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (id, acl) in &self.security.acls {
            if acl.owner.as_deref() != Some(role) {
                continue;
            }
            if let Some(t) = self.table_by_id(*id) {
                out.push(t.schema.name.clone());
            } else if let Some((name, _)) = self.views.get(id) {
                out.push(name.clone());
            }
        }
        out
    }

    /// Applies a role or privilege record; `false` for any other change.
    pub(crate) fn apply_security(&mut self, change: &SchemaChange) -> bool {
        let sec = &mut self.security;
        match change {
            SchemaChange::CreateRole(r) | SchemaChange::AlterRole(r) => {
                self.next_table_id = self.next_table_id.max(r.id + 1);
                // An altered role keeps its name; a stale entry under
                // another name (never written) would be replaced.
                sec.roles.retain(|_, old| old.id != r.id);
                sec.roles.insert(r.name.clone(), r.clone());
            }
            SchemaChange::DropRole { id } => {
                let name = sec
                    .roles
                    .values()
                    .find(|r| r.id == *id)
                    .map(|r| r.name.clone());
                if let Some(name) = name {
                    sec.roles.remove(&name);
                    let gone = Grantee::Role(name);
                    for acl in sec.acls.values_mut() {
                        acl.grants.remove(&gone);
                    }
                }
            }
            SchemaChange::SetOwner { object, owner } => {
                sec.acls.entry(*object).or_default().owner = Some(owner.clone());
            }
            SchemaChange::Grant {
                object,
                grantee,
                privileges,
            } => {
                let acl = sec.acls.entry(*object).or_default();
                let held = acl.grants.entry(grantee.clone()).or_default();
                *held = held.union(Privileges::of(privileges));
            }
            SchemaChange::Revoke {
                object,
                grantee,
                privileges,
            } => {
                if let Some(acl) = sec.acls.get_mut(object) {
                    if let Some(held) = acl.grants.get_mut(grantee) {
                        *held = held.minus(Privileges::of(privileges));
                        if held.is_empty() {
                            acl.grants.remove(grantee);
                        }
                    }
                }
            }
            SchemaChange::DropTable { id }
            | SchemaChange::DropView { id }
            | SchemaChange::DropPublication { id } => {
                sec.acls.remove(id);
                // The table or view itself is the caller's to drop.
                return false;
            }
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_matches_postgresql() {
        // The text form is PostgreSQL's; the keys are checked against the
        // wire front end's SCRAM implementation in `crates/pg`'s tests.
        let v = ScramVerifier::derive("secret", b"0123456789abcdef", 4096);
        let text = v.to_string();
        assert!(text.starts_with("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$"));
        let back = ScramVerifier::parse(&text).unwrap();
        assert_eq!(back, v);
        assert!(back.verify("secret"));
        assert!(!back.verify("Secret"));
        assert!(!text.contains("secret"));
    }

    #[test]
    fn malformed_verifiers_are_refused() {
        for bad in [
            "secret",
            "SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB",
            "SCRAM-SHA-256$10:c2FsdA==$",
            "SCRAM-SHA-256$99999999:c2FsdA==$x:y",
        ] {
            assert!(ScramVerifier::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn privileges_are_sets() {
        let p = Privileges::of(&[Privilege::Select, Privilege::Update]);
        assert!(p.contains(Privilege::Select) && !p.contains(Privilege::Insert));
        let q = p.minus(Privileges::of(&[Privilege::Select]));
        assert_eq!(q.list(), vec![Privilege::Update]);
        assert!(q.minus(q).is_empty());
    }
}
