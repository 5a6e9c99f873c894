"""What the example's Python programs share: one statement (or a
semicolon-separated transaction without parameters) over POST /v1/sql,
with the acting user as a header. Python standard library only."""
import json
import time
import urllib.error
import urllib.request

# Worth trying again: a serialization failure or deadlock (the server is
# SERIALIZABLE by default), and the server being away (restarting).
RETRY_CODES = {"40001", "40P01", "55P03"}


class SqlError(Exception):
    def __init__(self, code, message, text):
        super().__init__(f"{code}: {message} (in: {text[:200]})")
        self.code = code


def sql(base, text, params=(), user=None, retry_down=0.0, attempts=20):
    """Runs `text` on the server at `base` (http://host:port) and returns
    the decoded answer. Retries serialization failures; with retry_down > 0
    also waits up to that many seconds for a server that does not answer
    (only for statements that may safely run twice)."""
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["Aqueduct-Acting-User"] = user
    body = json.dumps({"sql": text, "params": list(params)}).encode()
    down_until = None
    attempt = 0
    while True:
        req = urllib.request.Request(base + "/v1/sql", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raw = e.read().decode(errors="replace")
            try:
                err = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                raise SqlError(str(e.code), raw, text) from None
            attempt += 1
            if err.get("code") in RETRY_CODES and attempt < attempts:
                time.sleep(0.01 * attempt)
                continue
            raise SqlError(err.get("code"), err.get("message"), text) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if retry_down <= 0:
                raise
            now = time.monotonic()
            down_until = down_until or now + retry_down
            if now >= down_until:
                raise
            time.sleep(0.2)


def rows(base, text, params=()):
    return [tuple(r) for r in sql(base, text, params, retry_down=30)["rows"]]


def quote(s):
    return "'" + s.replace("'", "''") + "'"


def schema_statements(path):
    """The statements of a .sql file (no semicolons inside them)."""
    with open(path) as f:
        text = "\n".join(l for l in f.read().splitlines() if not l.strip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]
