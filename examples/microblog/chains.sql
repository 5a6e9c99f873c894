CREATE CHAIN post_tweet (id bigint, author bigint, body text) AS $$
  HOP ON $author COMMUTATIVE;
    INSERT INTO tweets VALUES ($id, $author, $body);
$$;

-- Follow: the follower's side first, then the followee's counter. Both
-- hops write users (counters), so without the annotations two follows
-- would form an SC-cycle; increments commute, and saying so lets the
-- chain run piecewise.
CREATE CHAIN follow (follower bigint, followee bigint) AS $$
  HOP ON $follower COMMUTATIVE;
    INSERT INTO follows VALUES ($follower, $followee);
    UPDATE users SET following = following + 1 WHERE id = $follower;
  HOP ON $followee COMMUTATIVE COMMUTES WITH follow.1;
    UPDATE users SET followers = followers + 1 WHERE id = $followee;
$$;

-- A reader's timeline: one hop reading the join view.
CREATE CHAIN read_timeline (reader bigint) AS $$
  HOP ON $reader;
    SELECT count(*) INTO tweets FROM timeline WHERE reader = $reader;
$$;
