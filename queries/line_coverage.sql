-- name: line_coverage
-- description: For each executed program line, the share of its program's runs that reach it and how often it runs, least-reached first.
-- param: limit int >= 1 = 20 (rows to return)
-- A line is a line of one program (program_id); program_runs counts all of its runs, so
-- a share below 1 marks a line some inputs skip (REval's coverage question). Lines no
-- run executed have no steps and are not listed.
-- The top rows are chosen on integers; program text is joined for those rows only.
WITH per_run AS (
    SELECT run_id, line, count(*) AS executions
    FROM steps
    WHERE event = 'line'
    GROUP BY run_id, line
),
per_line AS (
    SELECT r.program_id, s.line, sum(s.executions) AS executions, count(*) AS runs_reaching
    FROM per_run s JOIN runs r USING (run_id)
    GROUP BY r.program_id, s.line
),
program_runs AS (
    SELECT program_id, count(*) AS runs FROM runs GROUP BY program_id
),
top AS (
    SELECT l.program_id, l.line, l.runs_reaching, pr.runs AS program_runs,
           round(l.runs_reaching / pr.runs, 3) AS share_of_runs, l.executions
    FROM per_line l
    JOIN program_runs pr USING (program_id)
    ORDER BY share_of_runs, l.executions DESC, l.program_id, l.line
    LIMIT $limit
)
SELECT t.program_id,
       p.sample_id,
       t.line,
       t.runs_reaching,
       t.program_runs,
       t.share_of_runs,
       t.executions,
       trim(split_part(p.code, chr(10), t.line))  AS source
FROM top t
JOIN programs p USING (program_id)
ORDER BY t.share_of_runs, t.executions DESC, t.program_id, t.line;
