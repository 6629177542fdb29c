-- name: hottest_lines
-- description: The program lines executed most often (LINE steps), with the source text.
-- params: none
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
LIMIT 10;
