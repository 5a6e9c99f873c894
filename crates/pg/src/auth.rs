//! Authentication: trust when no users are configured, SCRAM-SHA-256
//! otherwise (with channel binding over TLS when the certificate is known).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use aqueduct_sql::Engine;
use async_trait::async_trait;
use pgwire::api::auth::sasl::scram::{
    gen_salted_password, ScramAuth, ScramSecret, SCRAM_ITERATIONS,
};
use pgwire::api::auth::{AuthSource, LoginInfo, Password, ServerParameterProvider};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use tracing::warn;

/// Salt bytes per user, as PostgreSQL uses.
const SCRAM_SALT_BYTES: usize = 16;

/// Users and their salted passwords, derived once at start (the bootstrap
/// users of the configuration), and the roles created in SQL, whose SCRAM
/// verifiers are looked up in the catalog at each login.
pub(crate) struct Users {
    salted: HashMap<String, Password>,
    engine: Arc<Engine>,
    /// Keys the made-up salt of unknown users, so that a client cannot tell
    /// an unknown user from a wrong password by the salt it is sent.
    mock_seed: std::collections::hash_map::RandomState,
    mock_password: Vec<u8>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("count", &self.salted.len())
            .finish()
    }
}

impl Users {
    pub(crate) fn new(users: &HashMap<String, String>, engine: Arc<Engine>) -> Users {
        let salted = users
            .iter()
            .map(|(name, pw)| {
                let salt: [u8; SCRAM_SALT_BYTES] = rand::random();
                let hashed = gen_salted_password(pw, &salt, SCRAM_ITERATIONS);
                (name.clone(), Password::new(Some(salt.to_vec()), hashed))
            })
            .collect();
        Users {
            salted,
            engine,
            mock_seed: std::collections::hash_map::RandomState::new(),
            mock_password: rand::random::<[u8; 32]>().to_vec(),
        }
    }

    fn mock_salt(&self, user: &str) -> Vec<u8> {
        let mut salt = Vec::with_capacity(SCRAM_SALT_BYTES);
        for round in 0u8.. {
            if salt.len() >= SCRAM_SALT_BYTES {
                break;
            }
            let mut h = self.mock_seed.build_hasher();
            h.write_u8(round);
            h.write(user.as_bytes());
            salt.extend_from_slice(&h.finish().to_be_bytes());
        }
        salt.truncate(SCRAM_SALT_BYTES);
        salt
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().ok_or(PgWireError::UserNameRequired)?;
        Ok(match self.salted.get(user) {
            Some(p) => p.clone(),
            // Unknown users go through the whole exchange and fail like a
            // wrong password (as PostgreSQL's mock authentication does).
            None => Password::new(Some(self.mock_salt(user)), self.mock_password.clone()),
        })
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let user = login.user().ok_or(PgWireError::UserNameRequired)?;
        // A bootstrap user first (no role of the catalog may take its
        // name), then a role created in SQL that may log in.
        if !self.salted.contains_key(user) {
            if let Some(v) = self.engine.login_verifier(user) {
                return Ok((
                    ScramSecret::Verifier {
                        salt: v.salt,
                        iterations: v.iterations as usize,
                        stored_key: v.stored_key,
                        server_key: v.server_key,
                    },
                    None,
                ));
            }
        }
        let p = self.get_password(login).await?;
        Ok((
            ScramSecret::SaltedPassword {
                salt: p.salt().map(<[u8]>::to_vec).unwrap_or_default(),
                salted_password: p.password().to_vec(),
            },
            None,
        ))
    }
}

/// SCRAM mechanisms: one for plain connections, one with channel binding
/// for TLS connections (offering `-PLUS` over plain TCP would be wrong).
#[derive(Clone)]
pub(crate) struct Scram {
    pub(crate) plain: ScramAuth,
    pub(crate) tls: ScramAuth,
}

impl Scram {
    pub(crate) fn new(users: Arc<Users>, cert_chain_pem: Option<&[u8]>) -> Scram {
        let mut plain = ScramAuth::new(users.clone());
        plain.set_iterations(SCRAM_ITERATIONS);
        let mut tls = plain.clone();
        if let Some(pem) = cert_chain_pem {
            if let Err(e) = tls.configure_certificate(pem) {
                warn!(error = %e, "SCRAM channel binding disabled: the certificate's signature algorithm is not supported");
                tls = plain.clone();
            }
        }
        Scram { plain, tls }
    }
}

/// The ParameterStatus messages sent when authentication completes.
pub(crate) struct StartupParameters(pub(crate) Vec<(String, String)>);

impl ServerParameterProvider for StartupParameters {
    fn server_parameters<C>(&self, _client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        Some(self.0.iter().cloned().collect())
    }
}
