"""The ten Team tools in the OpenAPI schema (/api/schema/), from the same pydantic models.

drf-spectacular documents the DRF views; the tool endpoint is a plain async
view, so a postprocessing hook adds one operation per tool.
"""
from drf_spectacular.extensions import OpenApiAuthenticationExtension

from mailbox.transports.tools import TOOLS

REF = "#/components/schemas/{model}"
ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        },
        "persisted": {"type": "boolean"},
    },
    "required": ["error"],
}


class MemberBearerScheme(OpenApiAuthenticationExtension):
    target_class = "mailbox.transports.api.permissions.MemberBearerAuthentication"
    name = "memberBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A member token (manage.py member_token)."}


def _component(schema: dict, components: dict) -> dict:
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    return schema


def add_tool_paths(result, generator, request, public):
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["ToolError"] = ERROR
    security = result["components"].setdefault("securitySchemes", {})
    security.setdefault("memberBearer", {"type": "http", "scheme": "bearer"})
    error_ref = {"$ref": "#/components/schemas/ToolError"}
    for tool in TOOLS.values():
        args = _component(tool.args.model_json_schema(ref_template=REF), components)
        out = _component(tool.result.model_json_schema(ref_template=REF), components)
        components[f"{tool.name}_arguments"] = args
        components[f"{tool.name}_result"] = out
        result["paths"][f"/api/v1/tools/{tool.name}"] = {
            "post": {
                "operationId": f"tool_{tool.name}",
                "summary": tool.name,
                "description": tool.description,
                "tags": ["tools"],
                "security": [{"memberBearer": []}],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{tool.name}_arguments"}}},
                },
                "responses": {
                    "200": {
                        "description": "the tool's result",
                        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{tool.name}_result"}}},
                    },
                    **{
                        str(status): {"description": "refused", "content": {"application/json": {"schema": error_ref}}}
                        for status in (400, 401, 403, 404, 409, 413, 429)
                    },
                },
            }
        }
    return result
