-- Writes of different sessions no longer wait for one another: each takes
-- an advisory lock of its session (and the store-wide one in shared mode)
-- instead of the row of `store_counters`, and numbers come from these
-- sequences. A session's numbers still grow in the order of its commits,
-- since they are taken under its lock; numbers of different sessions are
-- no longer in commit order, and a number taken by a transaction that
-- rolls back is not given back. Writes across every session (pruning idle
-- ones) take the store-wide lock exclusively.
CREATE SEQUENCE message_seqs;
CREATE SEQUENCE turn_ids;
SELECT setval('message_seqs', mark, true)
FROM (SELECT GREATEST((SELECT last_seq FROM store_counters),
                      (SELECT COALESCE(MAX(seq), 0) FROM messages)) AS mark) AS m
WHERE mark > 0;
SELECT setval('turn_ids', mark, true)
FROM (SELECT GREATEST((SELECT last_turn FROM store_counters),
                      (SELECT COALESCE(MAX(id), 0) FROM turns)) AS mark) AS t
WHERE mark > 0;
DROP TABLE store_counters;
