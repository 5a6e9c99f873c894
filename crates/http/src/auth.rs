//! Who an HTTP request runs as.
//!
//! A bearer token maps to a role (`HttpConfig::token_roles`); tokens of the
//! plain list (`HttpConfig::tokens`, the older form) run as a bootstrap
//! superuser. With no token configured, a server without users trusts
//! every request (a superuser, as its PostgreSQL clients are), and a
//! server with users refuses the API, so that it is never a way around
//! password authentication.

use std::collections::BTreeMap;

use aqueduct_sql::{Engine, Principal, SqlError, DEFAULT_PRINCIPAL};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;

use crate::error_response;

/// How requests are authenticated.
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpAuth {
    /// Tokens of a bootstrap superuser.
    pub(crate) superuser_tokens: Vec<String>,
    /// Token → role name.
    pub(crate) token_roles: BTreeMap<String, String>,
    /// Users are configured: without a token nothing is served.
    pub(crate) users_configured: bool,
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer <token>` header; the scheme's
/// name is case-insensitive (RFC 9110).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(|c: char| c.is_ascii_whitespace())?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized(e: SqlError) -> Box<Response> {
    let mut r = error_response(StatusCode::UNAUTHORIZED, &e);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    Box::new(r)
}

impl HttpAuth {
    fn has_tokens(&self) -> bool {
        !self.superuser_tokens.is_empty() || !self.token_roles.is_empty()
    }

    /// The principal a request runs as, or the 401 response refusing it.
    pub(crate) fn principal(
        &self,
        engine: &Engine,
        headers: &HeaderMap,
    ) -> Result<Principal, Box<Response>> {
        if !self.has_tokens() {
            if self.users_configured {
                return Err(unauthorized(
                    SqlError::new(
                        "28000",
                        "the HTTP API is closed: this server has users but no HTTP token",
                    )
                    .with_hint(
                        "map a token to a role in the config file ([http_tokens] \"<token>\" = \"<role>\") and send Authorization: Bearer <token>",
                    ),
                ));
            }
            return Ok(Principal::superuser(DEFAULT_PRINCIPAL));
        }
        let Some(given) = bearer_token(headers) else {
            return Err(unauthorized(
                SqlError::new("28000", "a valid bearer token is required")
                    .with_hint("send the header Authorization: Bearer <token>"),
            ));
        };
        // Every configured token is compared, in constant time each.
        let mut superuser = false;
        for t in &self.superuser_tokens {
            superuser |= constant_time_eq(t.as_bytes(), given.as_bytes());
        }
        let mut role = None;
        for (t, r) in &self.token_roles {
            if constant_time_eq(t.as_bytes(), given.as_bytes()) {
                role = Some(r);
            }
        }
        if let Some(role) = role {
            if engine.is_bootstrap_user(role) {
                return Ok(Principal::superuser(role.clone()));
            }
            if engine.role_exists(role) {
                return Ok(Principal::role(role.clone()));
            }
            return Err(unauthorized(
                SqlError::new(
                    "28000",
                    format!("the bearer token maps to role \"{role}\", which does not exist"),
                )
                .with_hint(format!(
                    "create the role (CREATE ROLE {role}) or map the token to another role"
                )),
            ));
        }
        if superuser {
            return Ok(Principal::superuser(DEFAULT_PRINCIPAL));
        }
        Err(unauthorized(
            SqlError::new("28000", "a valid bearer token is required")
                .with_hint("send the header Authorization: Bearer <token>"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for v in ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR   abc "] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert_eq!(bearer_token(&h), Some("abc"), "{v}");
        }
        for v in ["Basic abc", "Bearer", "Bearerabc", "Bearer  "] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert_eq!(bearer_token(&h), None, "{v}");
        }
    }
}
