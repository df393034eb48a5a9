"""Where units come from: local or remote files, parquet shards, JSONL lines."""
