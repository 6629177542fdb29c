-- name: branch_balance
-- description: Each condition (if, elif, while, conditional expression, comprehension filter) with how often it was true and false over all analysed runs.
-- param: limit int >= 1 = 20 (rows to return)
-- requires: branches(run_id, line, col, kind, taken): run steptrace analyse first
-- A condition is identified by its program, line and 0-based column; the outcomes come
-- from the analysis runs (steptrace analyse), one row of branches per evaluation.
SELECT p.program_id,
       p.sample_id,
       b.line,
       b.col,
       b.kind,
       count(*)                                            AS evaluations,
       count(*) FILTER (WHERE b.taken)                     AS true_count,
       count(*) FILTER (WHERE NOT b.taken)                 AS false_count,
       count(DISTINCT b.run_id)                            AS runs,
       round(count(*) FILTER (WHERE b.taken) / count(*), 3) AS true_share,
       trim(split_part(p.code, chr(10), b.line))           AS source
FROM branches b
JOIN runs r USING (run_id)
JOIN programs p USING (program_id)
GROUP BY p.program_id, p.sample_id, b.line, b.col, b.kind, p.code
ORDER BY evaluations DESC, p.program_id, b.line, b.col
LIMIT $limit;
