-- name: written_files
-- description: What the runs left in their working directory (/work) and /tmp, a row per file: its size, digest and text (when it is UTF-8 and kept whole).
-- params: none
-- The files table holds each run's files (docs/guides/runs.md, "Files"): a file's first
-- 65,536 bytes as a BLOB; here the text of a UTF-8 file kept whole, NULL otherwise.
SELECT r.run_id,
       r.sample_id,
       f.path,
       f.size,
       f.sha256,
       CASE WHEN f.utf8 AND NOT f.truncated THEN decode(f.content) END AS text
FROM files f
JOIN runs r USING (run_id)
WHERE f.kind = 'file'
ORDER BY r.run_id, f.path;
