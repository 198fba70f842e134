FROM python:3.11-slim
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# collectstatic needs settings, not the keys of any deployment: a throwaway one for the build.
RUN SECRET_KEY=$(python -c "import secrets; print(secrets.token_urlsafe(50))") \
    ACCELPLANE_ENCRYPTION_KEY=$(python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())") \
    python manage.py collectstatic --noinput -v 0
EXPOSE 8000
