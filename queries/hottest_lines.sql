-- name: hottest_lines
-- description: The program lines executed most often across all runs (line steps), with the source text.
-- param: limit int >= 1 = 10 (rows to return)
-- Output columns are pinned by make demo and the CLI tests; line_coverage adds how many
-- of a program's runs reach each line.
-- A line is a line of one program (program_id). Lines are counted on integers first;
-- program text is joined only for the rows that can make the top (ties included).
WITH per_line AS (
    SELECT r.program_id, s.line, count(*) AS executions
    FROM steps s
    JOIN runs r USING (run_id)
    WHERE s.event = 'line'
    GROUP BY r.program_id, s.line
),
candidates AS (
    SELECT * FROM per_line
    WHERE executions >= (SELECT min(executions)
                         FROM (SELECT executions FROM per_line
                               ORDER BY executions DESC LIMIT $limit))
)
SELECT p.sample_id,
       c.line,
       c.executions,
       trim(split_part(p.code, chr(10), c.line))       AS source
FROM candidates c
JOIN programs p USING (program_id)
ORDER BY c.executions DESC, p.sample_id, c.line
LIMIT $limit;
