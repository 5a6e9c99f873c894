"""Timelines assembled on the client from Aqueduct's releases.

Aqueduct publishes the committed writes at fixed wall-clock times (its
release interval, say 1 s): release r covers the writes committed between
release r-1 and release r. Everything published about a release is
immutable, so any HTTP cache can keep it:

- ``GET /v1/releases/{r}/changes?table=T&column=C&value=V``: the rows of
  table T with C = V that release r inserted, updated or deleted;
- ``GET /v1/timemaps/{map}?period=P&start_ms=S``: which values of a
  column (here: which authors, which followers) were written by the
  releases whose interval lies in [S, S + P). A bucket is complete, and
  then immutable, once the last release in it is out.

A client that knows the schedule (the interval) knows which release is in
force without asking, and brings each user's timeline up to that release
itself, the way the paper "Poor Man's Social Network" describes:

1. whom the user follows: the follows time map says in which releases the
   user's follows changed; those releases' changes, filtered on the user,
   are applied in order;
2. for each followed author, the author's newest K tweets as of the
   release: the tweets time map is walked backwards from the release, from
   coarse buckets to fine ones, into the releases in which the author
   wrote, until K tweets are found or the tweets already held for that
   author (as of an earlier release) are reached;
3. the timeline is the newest K among those.

A user's state (followees, and each author's newest K tweets with the
release they are valid for) is kept between reads: a read at the same
release as the last one costs nothing, and a read one release later asks
only about that release. Every request goes to one HTTP origin (in the
example, nginx in front of Aqueduct's HTTP port), so the responses are
shared between users through that cache.

Only the Python standard library is used.
"""

import heapq
import http.client
import json
import time
import urllib.parse

__all__ = ["FeedClient", "NotReleased", "HistoryGone", "duration_text"]


class NotReleased(Exception):
    """The release (or a time-map bucket ending at it) is not out yet."""


class HistoryGone(Exception):
    """The server no longer keeps a release the client needs (410)."""


class ServerError(Exception):
    pass


def duration_text(ms):
    """A duration as Aqueduct's SQL and URLs write it: 500ms, 1s, 30s, 3min."""
    if ms % 60000 == 0:
        return f"{ms // 60000}min"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


class _Http:
    """One keep-alive HTTP/1.1 connection, reopened when the peer closes it."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None
        self.requests = 0
        self.bytes = 0
        self.statuses = {}  # HTTP status -> count
        self.kinds = {}  # what was asked for -> count
        self.cache = {}  # X-Cache-Status header (the proxy's verdict) -> count

    def get(self, path, kind="other"):
        """(status, parsed JSON body or None)."""
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("GET", path, headers={"Accept": "application/json"})
                resp = self.conn.getresponse()
                body = resp.read()
            except (http.client.HTTPException, ConnectionError, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
                continue
            if resp.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            self.requests += 1
            self.bytes += len(body)
            self.statuses[resp.status] = self.statuses.get(resp.status, 0) + 1
            verdict = resp.getheader("X-Cache-Status")
            if verdict:
                self.cache[verdict] = self.cache.get(verdict, 0) + 1
            try:
                data = json.loads(body) if body else None
            except ValueError:
                data = None
            return resp.status, data
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class _User:
    __slots__ = ("release", "followees", "authors", "timeline")

    def __init__(self):
        self.release = None  # the release the state below is valid for
        self.followees = set()
        # author -> (release, that author's newest K tweets as of it, newest
        # first). Tweets are never rewritten by the example's workload, but
        # updates and deletes are applied all the same.
        self.authors = {}
        self.timeline = []


class FeedClient:
    """Assembles users' timelines from releases, through an HTTP cache.

    host, port       the HTTP origin (the cache in front of Aqueduct)
    interval_ms      the server's release interval
    periods_ms the time maps' periods; the finest must be the
                     release interval, each must divide the next
    origin_release   no data of interest was written in this release or
                     before (the release in force when the tables were made)
    k                timeline length
    """

    def __init__(
        self,
        host,
        port,
        interval_ms,
        periods_ms,
        origin_release,
        k=20,
        tweets_table="tweets",
        tweets_map="tweets_by_author",
        author_column="author",
        follows_table="follows",
        follows_map="follows_by_follower",
        follower_column="follower",
        followee_column="followee",
        timeout=10,
        clock=time.time,
        whole_release_max=64,
    ):
        grans = sorted(set(periods_ms))
        if grans[0] != interval_ms:
            raise ValueError("the finest time-map period must be the release interval")
        for fine, coarse in zip(grans, grans[1:]):
            if coarse % fine:
                raise ValueError(f"period {coarse} ms is not a multiple of {fine} ms")
        self.http = _Http(host, port, timeout)
        self.interval = interval_ms
        self.grans = grans
        self.origin = origin_release
        self.k = k
        self.tweets_table, self.tweets_map, self.author_col = tweets_table, tweets_map, author_column
        self.follows_table, self.follows_map = follows_table, follows_map
        self.follower_col, self.followee_col = follower_column, followee_column
        self.clock = clock
        # A release whose time-map entry has at most this many values is
        # fetched whole (one URL, shared by every user); a larger one (a
        # bulk load) is fetched per value wanted.
        self.whole_release_max = whole_release_max
        self.users = {}
        self.reads = 0
        self.reads_without_requests = 0
        self.fallbacks = 0  # reads that found the clock's release not out yet

    # --- the public part -------------------------------------------------------

    def release_due(self):
        """The newest release the schedule says is out (it may take the server
        a few milliseconds to publish it)."""
        return int(self.clock() * 1000) // self.interval

    def timeline(self, user, release=None):
        """(release, rows): `user`'s K newest tweets as of `release` (default:
        the release due now, or the one before while that is not out)."""
        self.reads += 1
        before = self.http.requests
        u = self.users.get(user)
        if u is None:
            u = self.users[user] = _User()
        if release is not None:
            self._sync(user, u, release)
        else:
            due = self.release_due()
            for r in (due, due - 1, due - 2):
                if u.release is not None and u.release >= r:
                    break
                try:
                    self._sync(user, u, r)
                    break
                except NotReleased:
                    self.fallbacks += 1
                    if r == due - 2:
                        raise
        if self.http.requests == before:
            self.reads_without_requests += 1
        return u.release, list(u.timeline)

    def forget(self, user):
        self.users.pop(user, None)

    def close(self):
        self.http.close()

    def stats(self):
        return {
            "reads": self.reads,
            "reads_without_requests": self.reads_without_requests,
            "fallbacks": self.fallbacks,
            "requests": self.http.requests,
            "bytes": self.http.bytes,
            "statuses": dict(self.http.statuses),
            "cache": dict(self.http.cache),
            "kinds": dict(self.http.kinds),
        }

    # --- requests ---------------------------------------------------------------

    def _get(self, path, kind):
        status, data = self.http.get(path, kind)
        if status == 200:
            return data
        if status == 404:
            raise NotReleased(path)
        if status == 410:
            raise HistoryGone(path)
        raise ServerError(f"GET {path}: HTTP {status}: {data}")

    def _bucket(self, name, start_ms, gran_ms):
        q = urllib.parse.urlencode({"period": duration_text(gran_ms), "start_ms": start_ms})
        path = f"/v1/timemaps/{urllib.parse.quote(name)}?{q}"
        data = self._get(path, f"time map {name}")
        if not data.get("complete"):
            # Only buckets that end at or before a published release are
            # asked for; an incomplete one means that release is not out.
            raise NotReleased(path)
        if data.get("partial"):
            # Some of its releases came before the map had all their writes
            # (it was made, or the server started, within the bucket): a
            # value missing from it proves nothing.
            raise HistoryGone(f"{path}: the time map does not cover all of this period")
        return set(data["values"])

    def _changes(self, release, table, column=None, value=None):
        args = {"table": table}
        if column is not None:
            args.update(column=column, value=value)
        data = self._get(f"/v1/releases/{release}/changes?{urllib.parse.urlencode(args)}", f"changes of {table}")
        return sorted(data["changes"], key=lambda c: c["lsn"])

    def _changes_of(self, release, table, column, values, bucket_size):
        """{value: [changes with column = value]} for the wanted values, in
        commit order."""
        if bucket_size <= self.whole_release_max:
            out = {v: [] for v in values}
            for c in self._changes(release, table):
                v = c["row"][column]
                if v in out:
                    out[v].append(c)
            return out
        return {v: self._changes(release, table, column, v) for v in values}

    # --- walking the time maps -----------------------------------------------------

    def _cover(self, lo, hi, backward):
        """Aligned buckets (start, period) tiling [lo, hi), largest first,
        in time order (or reversed)."""
        out = []
        if not backward:
            t = lo
            while t < hi:
                g = max(g for g in self.grans if t % g == 0 and t + g <= hi)
                out.append((t, g))
                t += g
        else:
            t = hi
            while t > lo:
                g = max(g for g in self.grans if t % g == 0 and t - g >= lo)
                out.append((t - g, g))
                t -= g
        return out

    def _walk(self, name, lo_release, hi_release, wanted, backward):
        """Yields (release, values, size) for the releases in (lo_release,
        hi_release] whose time-map entry holds any of wanted(start_ms,
        end_ms), a set re-evaluated at each bucket (so the caller can narrow
        it as it goes): the wanted values found, and how many values the
        entry has in all."""
        lo, hi = lo_release * self.interval, hi_release * self.interval
        for start, gran in self._cover(lo, hi, backward):
            yield from self._descend(name, start, gran, wanted, backward)

    def _descend(self, name, start, gran, wanted, backward):
        want = wanted(start, start + gran)
        if not want:
            return
        values = self._bucket(name, start, gran)
        hit = want & values
        if not hit:
            return
        if gran == self.interval:
            # Release r's interval is [(r-1)*I, r*I).
            yield start // self.interval + 1, hit, len(values)
            return
        finer = max(g for g in self.grans if g < gran)
        subs = range(start, start + gran, finer)
        for sub in reversed(subs) if backward else subs:
            yield from self._descend(name, sub, finer, wanted, backward)

    # --- bringing one user up to a release ----------------------------------------

    def _sync(self, user, u, r):
        if u.release is not None and u.release >= r:
            return
        # Nothing below changes `u` until every request has succeeded: a
        # release found not out (or any error) leaves the state as it was.
        since = self.origin if u.release is None else u.release

        # 1. Whom the user follows at r.
        followees = set(u.followees)
        for q, hit, size in self._walk(self.follows_map, since, r, lambda a, b: {user}, backward=False):
            for c in self._changes_of(q, self.follows_table, self.follower_col, hit, size)[user]:
                row = c["row"]
                if c["op"] == "delete":
                    followees.discard(row[self.followee_col])
                elif c["op"] == "insert":
                    followees.add(row[self.followee_col])

        # 2. Each followee's newest K tweets at r, from the releases after
        # the ones already held for that author.
        floor = {}  # author -> the release its held tweets are valid for
        for a in followees:
            held = u.authors.get(a)
            floor[a] = held[0] if held is not None else self.origin
        need = {a for a in followees if floor[a] < r}
        found = {a: {} for a in need}  # author -> id -> row (newest version)
        dead = {a: set() for a in need}  # ids deleted by a newer release

        def wanted(start_ms, end_ms):
            return {a for a in need if floor[a] * self.interval < end_ms}

        for q, hit, size in self._walk(self.tweets_map, min(floor.values(), default=r), r, wanted, backward=True):
            authors = {a for a in hit if a in need and q > floor[a]}
            if not authors:
                continue
            changes = self._changes_of(q, self.tweets_table, self.author_col, authors, size)
            for a in authors:
                for c in reversed(changes[a]):
                    row = c["row"]
                    tid = row["id"]
                    if tid in found[a] or tid in dead[a]:
                        continue
                    if c["op"] == "delete":
                        dead[a].add(tid)
                    else:
                        found[a][tid] = row
                if len(found[a]) >= self.k:
                    need.discard(a)  # the rest of its tweets are older

        # 3. Commit the new state.
        for a in found:
            rows = dict(found[a])
            held = u.authors.get(a)
            if held is not None:
                for row in held[1]:
                    if row["id"] not in rows and row["id"] not in dead[a]:
                        rows[row["id"]] = row
            u.authors[a] = (r, heapq.nlargest(self.k, rows.values(), key=lambda row: row["id"]))
        for a in followees:
            if a not in found:
                u.authors[a] = (r, u.authors[a][1])
        # Authors no longer followed are forgotten (a later follow fetches
        # their tweets again).
        for a in list(u.authors):
            if a not in followees:
                del u.authors[a]
        u.followees = followees
        u.release = r
        u.timeline = heapq.nlargest(
            self.k,
            (row for a in followees for row in u.authors[a][1]),
            key=lambda row: row["id"],
        )
