-- The bench transition in PostgreSQL (benches/peers/README.md): the same steps as
-- transition.lua, as a PL/pgSQL function over three tables.
CREATE TABLE transitions (state text, event text, to_state text NOT NULL, PRIMARY KEY (state, event));
CREATE TABLE instances (id text PRIMARY KEY, state text NOT NULL, ctx jsonb NOT NULL,
                        events int NOT NULL DEFAULT 0);
CREATE TABLE history (id text, seq int, event text, from_state text, to_state text,
                      payload jsonb, at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (id, seq));

CREATE FUNCTION apply_event(p_id text, p_event text, p_payload jsonb) RETURNS text AS $$
DECLARE s text; t text; n int;
BEGIN
  SELECT state INTO s FROM instances WHERE id = p_id FOR UPDATE;
  IF s IS NULL THEN RAISE EXCEPTION 'INSTANCE_NOT_FOUND'; END IF;
  SELECT to_state INTO t FROM transitions WHERE state = s AND event = p_event;
  IF t IS NULL THEN RAISE EXCEPTION 'INVALID_TRANSITION'; END IF;
  UPDATE instances SET state = t, ctx = ctx || p_payload, events = events + 1
    WHERE id = p_id RETURNING events INTO n;
  INSERT INTO history (id, seq, event, from_state, to_state, payload)
    VALUES (p_id, n, p_event, s, t, p_payload);
  RETURN t;
END $$ LANGUAGE plpgsql;

-- The definition smdb-bench stores: one state `on`, event `inc` loops on it.
INSERT INTO transitions VALUES ('on', 'inc', 'on');
INSERT INTO instances (id, state, ctx) SELECT 'i' || k, 'on', '{"n": 0}' FROM generate_series(0, 3199) k;
