"""Shared helpers of the Python tool cases in scripts/tool-tests: named
checks that keep going after a failure, the libpq settings, and the tail of
a tool's statement log for the report."""
import os
import subprocess
import sys
import traceback

WORK = os.environ.get("TOOL_WORK") or "/tmp"


def conninfo():
    """The server in the PG* variables, as psycopg keyword arguments."""
    args = {
        "host": os.environ.get("PGHOST", "127.0.0.1"),
        "port": os.environ.get("PGPORT", "5432"),
        "dbname": os.environ.get("PGDATABASE", "aqueduct"),
        "user": os.environ.get("PGUSER", "postgres"),
    }
    if os.environ.get("PGPASSWORD"):
        args["password"] = os.environ["PGPASSWORD"]
    return args


def sqlalchemy_url(driver="postgresql+psycopg"):
    from sqlalchemy.engine import URL

    c = conninfo()
    return URL.create(driver, username=c["user"], password=c.get("password"),
                      host=c["host"], port=int(c["port"]), database=c["dbname"])


class CommandFailed(Exception):
    """A command exited non-zero; its message carries the output's tail."""


class Checks:
    """Runs named steps; each prints `step NAME: ok` or `step NAME: FAILED`
    with the reason. `finish()` prints `tool TOOL: ok` only if all passed."""

    def __init__(self, tool, sql_log=None):
        self.tool = tool
        self.sql_log = sql_log
        self.failures = []

    def step(self, name, fn, *args, show_sql=True, **kwargs):
        mark = self._log_size() if show_sql else -1
        try:
            result = fn(*args, **kwargs)
        except CommandFailed as e:
            self.fail(name, str(e), "", mark)
            return None
        except Exception as e:  # noqa: BLE001 - every failure is reported
            self.fail(name, f"{type(e).__name__}: {e}", traceback.format_exc(), mark)
            return None
        print(f"step {name}: ok", flush=True)
        return result

    def fail(self, name, reason, detail="", mark=None):
        self.failures.append(name)
        print(f"step {name}: FAILED: {reason}", flush=True)
        if detail:
            print(indent(detail.rstrip()), flush=True)
        tail = self.sql_tail(mark)
        if tail:
            print("    last statements the tool sent (from its log):", flush=True)
            print(indent(tail, "      "), flush=True)

    def expect(self, what, got, want):
        if got != want:
            raise AssertionError(f"{what}: got {got!r}, want {want!r}")

    def _log_size(self):
        try:
            return os.path.getsize(self.sql_log) if self.sql_log else None
        except OSError:
            return 0

    def sql_tail(self, mark, lines=12):
        if mark == -1 or not self.sql_log or not os.path.exists(self.sql_log):
            return ""
        with open(self.sql_log, encoding="utf-8", errors="replace") as f:
            if mark:
                f.seek(mark)
            text = f.read().splitlines()
        return "\n".join(clip(l) for l in text[-lines:])

    def run(self, name, argv, cwd=None, env=None, timeout=300, check_output=None, summarize=None,
            show_sql=True):
        """Runs a command as a step. Its whole output goes to
        $TOOL_WORK/NAME.out and NAME.err; on failure the step shows their
        tails (or summarize(stdout, stderr) when given). check_output(stdout,
        stderr) may raise to fail the step on a wrong answer."""
        def go():
            p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            for ext, text in (("out", p.stdout), ("err", p.stderr)):
                with open(os.path.join(WORK, f"{name}.{ext}"), "w", encoding="utf-8") as f:
                    f.write(text)
            if p.returncode != 0:
                shown = argv[1:] if argv[0] == sys.executable else argv
                if summarize:
                    detail = summarize(p.stdout, p.stderr)
                else:
                    detail = tail_text(p.stdout, 30) + "\n" + tail_text(p.stderr, 40)
                raise CommandFailed(f"`{' '.join(shown)}` exited {p.returncode} "
                                    f"(output in {WORK}/{name}.out, .err)\n{indent(detail)}")
            if check_output:
                check_output(p.stdout, p.stderr)
            return p.stdout
        return self.step(name, go, show_sql=show_sql)

    def finish(self):
        if self.failures:
            print(f"tool {self.tool}: FAILED ({len(self.failures)} step(s): {', '.join(self.failures)})", flush=True)
            sys.exit(1)
        print(f"tool {self.tool}: ok", flush=True)


def tail_text(text, n):
    lines = (text or "").rstrip().splitlines()
    return "\n".join(lines[-n:])


def clip(line, n=600):
    return line if len(line) <= n else line[:n] + " ...[clipped]"


def indent(text, prefix="    "):
    return "\n".join(prefix + l for l in text.splitlines())
