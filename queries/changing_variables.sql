-- name: changing_variables
-- description: Variables whose value changes most often across all runs (recorded state deltas), with the types they take.
-- param: limit int >= 1 = 20 (rows to return)
-- Every delta counts as a change: the first binding in a frame (arguments at the call
-- step), each later change of repr or type, and unbinding (del; no type). Event values
-- (<return>, <yield>, <exception>) are not variables. A name is counted per program, over
-- all of its functions.
-- The top rows are chosen on integer counts first; the types are then gathered for those
-- rows only (a million runs' states hold millions of type names).
WITH per_run AS (
    SELECT run_id, var, count(*) AS changes
    FROM states
    WHERE NOT starts_with(var, '<')
    GROUP BY run_id, var
),
top AS (
    SELECT r.program_id, v.var, sum(v.changes) AS changes, count(*) AS runs,
           max(v.changes) AS max_changes_in_a_run
    FROM per_run v
    JOIN runs r USING (run_id)
    GROUP BY r.program_id, v.var
    ORDER BY changes DESC, r.program_id, v.var
    LIMIT $limit
),
types AS (
    SELECT t.program_id, t.var, list_sort(list_distinct(list(s.type))) AS types
    FROM top t
    JOIN runs r ON r.program_id = t.program_id
    JOIN states s ON s.run_id = r.run_id AND s.var = t.var
    GROUP BY t.program_id, t.var
)
SELECT p.program_id,
       p.sample_id,
       t.var,
       t.changes,
       t.runs,
       t.max_changes_in_a_run,
       array_to_string(y.types, ', ')                          AS types
FROM top t
JOIN types y USING (program_id, var)
JOIN programs p USING (program_id)
ORDER BY t.changes DESC, p.program_id, t.var;
