# One image for both services: `steer scorer run ...` and `steer webhook serve ...`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY steer ./steer
COPY scorer ./scorer
COPY webhook ./webhook
COPY launcher ./launcher
# Only the modules: a key or certificate left in certs/ must never reach an image layer.
COPY certs/*.py ./certs/
# The versions the tests ran on (constraints.txt), the build backend's included: it is installed
# from the lock and the build uses it instead of an isolated, unpinned one.
RUN pip install --no-cache-dir -c constraints.txt setuptools \
 && pip wheel --no-cache-dir --no-build-isolation -c constraints.txt --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --create-home steer
COPY --from=build /wheels /wheels
# Only the wheels built above: nothing is resolved again.
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl && rm -rf /wheels
USER 65532
ENTRYPOINT ["steer"]
CMD ["--help"]
