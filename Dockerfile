# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 10001 gpuq
WORKDIR /app
COPY pyproject.toml ./
COPY queue_service ./queue_service
COPY scheduler ./scheduler
COPY frontend ./frontend
COPY manage.py ./
# No collectstatic: WhiteNoise serves /static/ from the installed apps (settings.py).
RUN pip install --no-cache-dir .
USER gpuq
EXPOSE 8000
# Threaded workers, as docker-compose.yml's web: a long log download outlives a sync worker's
# 30 s timeout.
CMD ["gunicorn", "queue_service.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--worker-class", "gthread", "--threads", "8"]
