-- A small social application (Synapse, EuroSys '15, section 5, in
-- miniature): users write posts, comment on each other's posts and like
-- them. app.py writes it; the publications at the end are what leaves the
-- server.

CREATE TABLE users (
    id         integer PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL UNIQUE
);

CREATE TABLE posts (
    id         integer PRIMARY KEY,
    author_id  integer NOT NULL REFERENCES users (id),
    title      text NOT NULL,
    body       text NOT NULL,
    draft      boolean NOT NULL DEFAULT false
);

CREATE TABLE comments (
    id         integer PRIMARY KEY,
    post_id    integer NOT NULL REFERENCES posts (id),
    author_id  integer NOT NULL REFERENCES users (id),
    body       text NOT NULL
);

CREATE TABLE likes (
    post_id    integer NOT NULL REFERENCES posts (id),
    user_id    integer NOT NULL REFERENCES users (id),
    PRIMARY KEY (post_id, user_id)
);

-- Written by decorator.py, not by the application: what each user is
-- interested in, derived from that user's own copy of `social`.
CREATE TABLE user_interests (
    user_id    integer PRIMARY KEY REFERENCES users (id),
    interests  text NOT NULL
);

-- Everything the mailer, analytics and search follow. Emails leave the
-- server lower-cased under another name; drafts do not leave it at all
-- (publishing a draft reaches subscribers as a new post); likes stay.
CREATE PUBLICATION social
  FOR TABLE users (id, name, lower(email) AS email_lc),
            posts WHERE (NOT draft),
            comments
  WITH (mode = 'causal');

-- Users with their decorations, for the profile service.
CREATE PUBLICATION profiles
  FOR TABLE users (id, name),
            user_interests
  WITH (mode = 'causal');
