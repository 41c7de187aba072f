# kubeherd's operator image. Two stages: the build stage installs the locked dependencies
# (uv.lock, with their hashes) and kubeherd into a virtualenv; the final stage is slim Python
# with that virtualenv only, run as a non-root user. Build it with `make image`.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN pip install uv==0.13.9
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
# The exact versions and hashes of uv.lock, without any dependency group: pyproject.toml's
# default-groups (dev, bench) are exported unless --no-default-groups (--no-dev left bench in).
RUN uv export --frozen --no-default-groups --no-emit-project --format requirements-txt \
      -o requirements.txt \
    && python -m venv /opt/kubeherd \
    && /opt/kubeherd/bin/pip install --require-hashes -r requirements.txt
COPY operator ./operator
RUN /opt/kubeherd/bin/pip install --no-deps .

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/kubeherd /opt/kubeherd
# A numeric user, so that runAsNonRoot can check it without a passwd lookup.
USER 65532:65532
ENV PATH=/opt/kubeherd/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8080
ENTRYPOINT ["kubeherd"]
CMD ["run"]
