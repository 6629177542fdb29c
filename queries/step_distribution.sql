-- name: step_distribution
-- description: How many runs take how many line steps and instruction steps, in buckets (powers of two, or a fixed width).
-- param: width int >= 0 = 0 (bucket width in steps; 0 for power-of-two buckets [2^k, 2^(k+1)))
-- A bucket is [bucket_from, bucket_to): with width 0, 0 steps is [0, 1), 5 is [4, 8).
-- Runs that recorded no counts (timeout, exited) are left out; empty buckets are not listed.
WITH counts AS (
    SELECT 'line_steps' AS measure, line_steps AS n FROM runs WHERE line_steps IS NOT NULL
    UNION ALL
    SELECT 'instruction_steps', instruction_steps FROM runs WHERE instruction_steps IS NOT NULL
),
bucketed AS (
    SELECT measure,
           -- step_bucket(n).low: engine/scoring/_buckets.py bucket_from_sql
           CASE WHEN n IS NULL THEN NULL
                WHEN $width > 0 THEN (n // $width) * $width
                WHEN n < 1 THEN 0
                ELSE 1::BIGINT << floor(log2(n))::INTEGER END AS bucket_from
    FROM counts
)
SELECT measure,
       bucket_from,
       -- engine/scoring/_buckets.py bucket_to_sql
       CASE WHEN bucket_from IS NULL THEN NULL
            WHEN $width > 0 THEN bucket_from + $width
            WHEN bucket_from = 0 THEN 1
            ELSE 2 * bucket_from END AS bucket_to,
       count(*) AS runs
FROM bucketed
GROUP BY measure, bucket_from
ORDER BY measure DESC, bucket_from;
