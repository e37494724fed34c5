# Bridge in a slim image: runs as a non-root user, keeps its database and workspace in /data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    BRIDGE_STORAGE__PATH=/data/bridge.db \
    BRIDGE_TOOLS__WORKSPACE=/data/workspace \
    # The admin server on the container's own loopback, for the HEALTHCHECK below. Publishing it
    # needs [admin] listen = "0.0.0.0" and a token (BRIDGE_ADMIN__TOKEN).
    BRIDGE_ADMIN__ENABLED=true

WORKDIR /app
# The dependencies first, from pyproject.toml alone (with empty packages in place of the code), so a
# change to the code reuses this layer instead of installing everything again.
COPY pyproject.toml README.md ./
RUN mkdir bridge adapters && touch bridge/__init__.py adapters/__init__.py \
    && pip install '.[postgresql]' && pip uninstall -y bridge && rm -r bridge adapters
COPY bridge ./bridge
COPY adapters ./adapters
RUN pip install --no-deps '.[postgresql]' && useradd --create-home --uid 10001 bridge \
    && mkdir -p /data && chown bridge /data

USER bridge
VOLUME ["/data"]
# The admin server's port ([admin] port). It listens on the container's loopback unless
# [admin] listen = "0.0.0.0", which needs a token; publish it (-p 127.0.0.1:8765:8765) only then.
EXPOSE 8765
# GET /healthz with the token (the configured one, or the one the start wrote to /data/admin.token).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["bridge", "health"]
# Mount a config at /app/config.toml (read by default) or pass --config; secrets via BRIDGE_* env vars.
ENTRYPOINT ["bridge"]
CMD ["run"]
