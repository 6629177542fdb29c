-- name: hottest_lines
-- description: The program lines executed most often across all runs (line steps), with the source text.
-- param: limit int >= 1 = 10 (rows to return)
-- Output columns are pinned by make demo and the CLI tests; line_coverage adds how many
-- of a program's runs reach each line.
SELECT p.sample_id,
       s.line,
       count(*)                                        AS executions,
       trim(split_part(p.code, chr(10), s.line))       AS source
FROM steps s
JOIN runs r USING (run_id)
JOIN programs p USING (program_id)
WHERE s.event = 'line'
GROUP BY p.sample_id, s.line, p.code
ORDER BY executions DESC, p.sample_id, s.line
LIMIT $limit;
