"""The local host's real tools: files in worker threads, processes in their own groups."""
