# syntax=docker/dockerfile:1
# The autoresearch image: server, worker and CLI in one (ENTRYPOINT autoresearch).
# Build: docker compose build, or docker build -t autoresearch-server .
# GPU hosts need torch's CUDA build, which comes from PyTorch's own index: TORCH_INDEX_URL picks
# it (default CUDA 12.8; e.g. .../whl/cu126 for older drivers, .../whl/cpu for a CPU-only image).
# docs/operations.md, "Docker compose".
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_DEVICE_ORDER=PCI_BUS_ID \
    DATA_DIR=/data

# bubblewrap sandboxes train.py; git is what GitPython drives for the research repo.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt ./
# torch first, from the index that has the wanted CUDA build, at the version requirements.txt pins;
# the second install then finds it satisfied and takes everything else from PyPI.
RUN pip install --index-url "$TORCH_INDEX_URL" "$(grep -E '^torch==' requirements.txt | cut -d' ' -f1)" \
    && pip install -r requirements.txt

COPY pyproject.toml alembic.ini ./
COPY agent agent
COPY cli cli
COPY client client
COPY protocol protocol
COPY harness harness
COPY migrations migrations
COPY server server
COPY worker worker
COPY --chmod=0755 docker/gpu-worker.sh /usr/local/bin/autoresearch-gpu-worker
# Editable, as in development: the migrations and the harness baseline are read from /app.
RUN pip install --no-deps -e .

# An unprivileged user: bubblewrap then sandboxes train.py in a user namespace of its own.
# /data is created here so that named volumes mounted on it belong to this user.
RUN useradd --create-home --uid 1000 autoresearch \
    && mkdir -p /data \
    && chown autoresearch:autoresearch /data
USER autoresearch
VOLUME ["/data"]
EXPOSE 8000

ENTRYPOINT ["autoresearch"]
CMD ["--help"]
