-- name: hottest_functions
-- description: Functions activated most often across all runs (call steps), with their line steps and the share of their program's runs that call them.
-- param: limit int >= 1 = 20 (rows to return)
-- func is the code object's qualified name (f, f.<locals>.g, Stack.push); a generator's
-- activation is one call however often it resumes.
WITH per_run AS (
    SELECT run_id,
           func,
           count(*) FILTER (WHERE event = 'call') AS calls,
           count(*) FILTER (WHERE event = 'line') AS line_steps
    FROM steps
    GROUP BY run_id, func
),
per_func AS (
    SELECT r.program_id, s.func, sum(s.calls) AS calls, sum(s.line_steps) AS line_steps,
           count(*) AS runs_reaching
    FROM per_run s JOIN runs r USING (run_id)
    GROUP BY r.program_id, s.func
),
program_runs AS (
    SELECT program_id, count(*) AS runs FROM runs GROUP BY program_id
)
SELECT p.program_id,
       p.sample_id,
       f.func,
       f.calls,
       f.line_steps,
       f.runs_reaching,
       pr.runs                              AS program_runs,
       round(f.runs_reaching / pr.runs, 3)  AS share_of_runs
FROM per_func f
JOIN program_runs pr USING (program_id)
JOIN programs p USING (program_id)
ORDER BY f.calls DESC, f.line_steps DESC, p.program_id, f.func
LIMIT $limit;
