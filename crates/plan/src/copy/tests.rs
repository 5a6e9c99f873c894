//! Tests of `COPY`'s formats.
