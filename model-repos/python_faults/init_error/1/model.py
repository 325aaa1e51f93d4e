import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise pb_utils.TritonModelException("init_error: cannot initialize")

    def execute(self, requests):
        return []
