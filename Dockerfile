# One image for both services: `steer scorer run ...` and `steer webhook serve ...`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY steer ./steer
COPY scorer ./scorer
COPY webhook ./webhook
# Only the modules: a key or certificate left in certs/ must never reach an image layer.
COPY certs/*.py ./certs/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --create-home steer
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532
ENTRYPOINT ["steer"]
CMD ["--help"]
