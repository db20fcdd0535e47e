/* libfmk_onnx_parser.so of the simulated CANN runtime: the ge:: (graph engine) symbols the
 * onnxruntime-cann provider imports for graph mode. Graph mode is not simulated: parsing and
 * building fail with ge::GRAPH_FAILED and a message; the classes the EP constructs on its stack
 * (AscendString, Graph: one std::shared_ptr each, 16 bytes) are left null, which their inline
 * destructors accept. Written in C with the C++ symbol names given by asm labels. */
#include <string.h>

#include "simcann.h"

#define GRAPH_SUCCESS 0u
#define GRAPH_FAILED 0xFFFFFFFFu
#define MSG "graph mode is not simulated: run the CANN EP with enable_cann_graph=0"

SIM_API void ascend_string_ctor(void *self, const char *name) __asm__("_ZN2ge12AscendStringC1EPKc");
void ascend_string_ctor(void *self, const char *name) {
    (void)name;
    memset(self, 0, 16);
}

SIM_API int ascend_string_lt(const void *self, const void *other) __asm__("_ZNK2ge12AscendStringltERKS0_");
int ascend_string_lt(const void *self, const void *other) {
    (void)self; (void)other;
    return 0;
}

SIM_API void graph_ctor(void *self, const char *name) __asm__("_ZN2ge5GraphC1EPKc");
void graph_ctor(void *self, const char *name) {
    (void)name;
    memset(self, 0, 16);
}

SIM_API uint32_t parse_onnx(const char *buf, size_t n, const void *params, void *graph)
    __asm__("_ZN2ge23aclgrphParseONNXFromMemEPKcmRKSt3mapINS_12AscendStringES3_St4lessIS3_ESaISt4pairIKS3_S3_EEERNS_5GraphE");
uint32_t parse_onnx(const char *buf, size_t n, const void *params, void *graph) {
    (void)buf; (void)n; (void)params; (void)graph;
    simcann_error((int)GRAPH_FAILED, "ge::aclgrphParseONNXFromMem", MSG);
    return GRAPH_FAILED;
}

SIM_API uint32_t build_initialize(void *options) __asm__("_ZN2ge22aclgrphBuildInitializeERSt3mapINS_12AscendStringES1_St4lessIS1_ESaISt4pairIKS1_S1_EEE");
uint32_t build_initialize(void *options) {
    (void)options;
    return GRAPH_SUCCESS;
}

SIM_API void build_finalize(void) __asm__("_ZN2ge20aclgrphBuildFinalizeEv");
void build_finalize(void) {}

SIM_API uint32_t build_model(const void *graph, const void *options, void *model)
    __asm__("_ZN2ge17aclgrphBuildModelERKNS_5GraphERKSt3mapINS_12AscendStringES4_St4lessIS4_ESaISt4pairIKS4_S4_EEERNS_15ModelBufferDataE");
uint32_t build_model(const void *graph, const void *options, void *model) {
    (void)graph; (void)options; (void)model;
    simcann_error((int)GRAPH_FAILED, "ge::aclgrphBuildModel", MSG);
    return GRAPH_FAILED;
}

SIM_API uint32_t save_model(const char *path, const void *model) __asm__("_ZN2ge16aclgrphSaveModelEPKcRKNS_15ModelBufferDataE");
uint32_t save_model(const char *path, const void *model) {
    (void)path; (void)model;
    simcann_error((int)GRAPH_FAILED, "ge::aclgrphSaveModel", MSG);
    return GRAPH_FAILED;
}
