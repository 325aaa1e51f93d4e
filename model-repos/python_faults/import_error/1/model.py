import triton_python_backend_utils as pb_utils
import no_such_module_tritonrs  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        return []
