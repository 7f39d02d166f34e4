"""HTTP starter, status and operator API: :data:`blueprint` is what ``function_app.py`` registers."""

from api.functions import blueprint
