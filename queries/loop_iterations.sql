-- name: loop_iterations
-- description: Loop header lines (for / while) and how many times each runs per activation of its function: a for loop that runs out runs its header iterations + 1 times, a while loop once per evaluation of its condition.
-- param: limit int >= 1 = 20 (rows to return)
-- Header lines are found in the program text (a line that starts with for, async for or
-- while); activations where the header never ran are not counted. A comprehension is
-- part of its line and has no header line of its own.
WITH program_lines AS (
    SELECT program_id, lines, unnest(range(1, len(lines) + 1)) AS line
    FROM (SELECT program_id, string_split(code, chr(10)) AS lines FROM programs)
),
headers AS (
    SELECT program_id, line, trim(lines[line]) AS source
    FROM program_lines
    WHERE regexp_matches(lines[line], '^\s*(async\s+for|for|while)\b')
),
per_frame AS (
    SELECT r.program_id, s.line, s.run_id, s.frame, count(*) AS executions
    FROM steps s
    JOIN runs r USING (run_id)
    JOIN headers h ON h.program_id = r.program_id AND h.line = s.line
    WHERE s.event = 'line'
    GROUP BY r.program_id, s.line, s.run_id, s.frame
)
SELECT p.program_id,
       p.sample_id,
       f.line,
       h.source,
       count(*)                      AS frames,
       sum(f.executions)             AS executions,
       min(f.executions)             AS min_per_frame,
       max(f.executions)             AS max_per_frame,
       round(avg(f.executions), 2)   AS avg_per_frame
FROM per_frame f
JOIN headers h USING (program_id, line)
JOIN programs p USING (program_id)
GROUP BY p.program_id, p.sample_id, f.line, h.source
ORDER BY max_per_frame DESC, executions DESC, p.program_id, f.line
LIMIT $limit;
