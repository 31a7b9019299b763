"""The GPU worker: claims experiments over HTTP and runs them with the harness runner."""
