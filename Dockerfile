# Bridge in a slim image: runs as a non-root user, keeps its database and workspace in /data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    BRIDGE_STORAGE__PATH=/data/bridge.db \
    BRIDGE_TOOLS__WORKSPACE=/data/workspace

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY adapters ./adapters
RUN pip install '.[postgresql]' && useradd --create-home --uid 10001 bridge && mkdir -p /data && chown bridge /data

USER bridge
VOLUME ["/data"]
# Mount a config at /app/config.toml (read by default) or pass --config; secrets via BRIDGE_* env vars.
ENTRYPOINT ["bridge"]
CMD ["run"]
