-- name: changing_variables
-- description: Variables whose value changes most often across all runs (recorded state deltas), with the types they take.
-- param: limit int >= 1 = 20 (rows to return)
-- Every delta counts as a change: the first binding in a frame (arguments at the call
-- step), each later change of repr or type, and unbinding (del; no type). Event values
-- (<return>, <yield>, <exception>) are not variables. A name is counted per program, over
-- all of its functions.
WITH per_run AS (
    SELECT run_id, var, count(*) AS changes, list(DISTINCT type) AS types
    FROM states
    WHERE NOT starts_with(var, '<')
    GROUP BY run_id, var
)
SELECT p.program_id,
       p.sample_id,
       v.var,
       sum(v.changes)                                          AS changes,
       count(*)                                                AS runs,
       max(v.changes)                                          AS max_changes_in_a_run,
       array_to_string(list_sort(list_distinct(flatten(list(v.types)))), ', ') AS types
FROM per_run v
JOIN runs r USING (run_id)
JOIN programs p USING (program_id)
GROUP BY p.program_id, p.sample_id, v.var
ORDER BY changes DESC, p.program_id, v.var
LIMIT $limit;
