\set k random(0, 3199)
SELECT apply_event('i' || :k, 'inc', '{"n": 1}');
