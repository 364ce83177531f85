from rest_framework.parsers import JSONParser


class AnyJSONParser(JSONParser):
    """Every API body is JSON, whatever Content-Type the client sent (curl -d sends a form type)."""

    media_type = "*/*"
