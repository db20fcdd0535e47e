/* The ACL functions the simulated libascendcl.so and libacl_op_compiler.so export (what
 * onnxruntime-cann's provider and our kernels call), declared as CANN declares them (acl/acl_rt.h,
 * acl_base_rt.h, acl_base_mdl.h, acl_mdl.h, acl_op.h, acl_op_compiler.h). Each definition in
 * ascendcl.c / op_compiler.c is compiled under these declarations, and test_cann_headers.py
 * compiles them after CANN's own headers (C++: a C function declared twice with two types does not
 * compile), so a signature that drifts from CANN's fails there.
 *
 * Not here: aclCreateTensor / aclDestroyTensor (nnopbase.c) and the aclnn ops (opapi.c), declared
 * by aclnn's headers, which the wheel the test reads does not ship; the ge:: symbols of graph mode
 * (onnx_parser.c), C++ names given by asm labels. */
#ifndef SIMCANN_ACL_API_H
#define SIMCANN_ACL_API_H

#include "simcann.h"

/* acl_rt.h, acl_base_rt.h: runtime */
SIM_API const char *aclGetRecentErrMsg(void);
SIM_API aclError aclInit(const char *configPath);
SIM_API aclError aclFinalize(void);
SIM_API aclError aclrtSetDevice(int32_t deviceId);
SIM_API aclError aclrtResetDevice(int32_t deviceId);
SIM_API aclError aclrtGetDevice(int32_t *deviceId);
SIM_API aclError aclrtGetDeviceCount(uint32_t *count);
SIM_API const char *aclrtGetSocName(void);
SIM_API aclError aclrtCreateStream(aclrtStream *stream);
SIM_API aclError aclrtDestroyStream(aclrtStream stream);
SIM_API aclError aclrtSynchronizeStream(aclrtStream stream);
SIM_API aclError aclrtSynchronizeDevice(void);
SIM_API aclError aclrtCreateEvent(aclrtEvent *event);
SIM_API aclError aclrtDestroyEvent(aclrtEvent event);
SIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
SIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
SIM_API aclError aclrtSynchronizeEvent(aclrtEvent event);
SIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
SIM_API aclError aclrtFree(void *devPtr);
SIM_API aclError aclrtMallocHost(void **hostPtr, size_t size);
SIM_API aclError aclrtFreeHost(void *hostPtr);
SIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
SIM_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                  aclrtStream stream);
SIM_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
SIM_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
SIM_API size_t aclDataTypeSize(aclDataType dataType);

/* acl_mdl.h: model execution (graph mode, not simulated: every call fails) */
SIM_API aclmdlDesc *aclmdlCreateDesc(void);
SIM_API aclError aclmdlDestroyDesc(aclmdlDesc *modelDesc);
SIM_API aclError aclmdlGetDesc(aclmdlDesc *modelDesc, uint32_t modelId);
SIM_API size_t aclmdlGetNumInputs(aclmdlDesc *modelDesc);
SIM_API size_t aclmdlGetNumOutputs(aclmdlDesc *modelDesc);
SIM_API size_t aclmdlGetInputSizeByIndex(aclmdlDesc *modelDesc, size_t index);
SIM_API size_t aclmdlGetOutputSizeByIndex(aclmdlDesc *modelDesc, size_t index);
SIM_API aclError aclmdlGetOutputDims(const aclmdlDesc *modelDesc, size_t index, aclmdlIODims *dims);
SIM_API aclmdlDataset *aclmdlCreateDataset(void);
SIM_API aclError aclmdlDestroyDataset(const aclmdlDataset *dataset);
SIM_API aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer);
SIM_API aclDataBuffer *aclmdlGetDatasetBuffer(const aclmdlDataset *dataset, size_t index);
SIM_API aclTensorDesc *aclmdlGetDatasetTensorDesc(const aclmdlDataset *dataset, size_t index);
SIM_API aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId);
SIM_API aclError aclmdlLoadFromMem(const void *model, size_t modelSize, uint32_t *modelId);
SIM_API aclError aclmdlUnload(uint32_t modelId);
SIM_API aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output);
SIM_API aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output,
                                    aclrtStream stream);

/* acl_op.h, acl_base_mdl.h, acl_base_rt.h, acl_op_compiler.h: single-operator mode */
SIM_API aclopAttr *aclopCreateAttr(void);
SIM_API void aclopDestroyAttr(const aclopAttr *attr);
SIM_API aclError aclopSetAttrBool(aclopAttr *attr, const char *attrName, uint8_t attrValue);
SIM_API aclError aclopSetAttrInt(aclopAttr *attr, const char *attrName, int64_t attrValue);
SIM_API aclError aclopSetAttrFloat(aclopAttr *attr, const char *attrName, float attrValue);
SIM_API aclError aclopSetAttrString(aclopAttr *attr, const char *attrName, const char *attrValue);
SIM_API aclError aclopSetAttrListInt(aclopAttr *attr, const char *attrName, int numValues, const int64_t *values);
SIM_API aclTensorDesc *aclCreateTensorDesc(aclDataType dataType, int numDims, const int64_t *dims, aclFormat format);
SIM_API void aclDestroyTensorDesc(const aclTensorDesc *desc);
SIM_API size_t aclGetTensorDescNumDims(const aclTensorDesc *desc);
SIM_API aclError aclGetTensorDescDimV2(const aclTensorDesc *desc, size_t index, int64_t *dimSize);
SIM_API size_t aclGetTensorDescSize(const aclTensorDesc *desc);
SIM_API aclError aclSetTensorConst(aclTensorDesc *desc, void *dataBuffer, size_t length);
SIM_API aclDataBuffer *aclCreateDataBuffer(void *data, size_t size);
SIM_API aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer);
SIM_API void *aclGetDataBufferAddr(const aclDataBuffer *dataBuffer);
SIM_API aclError aclopCompileAndExecute(const char *opType, int numInputs, const aclTensorDesc *const inputDesc[],
                                        const aclDataBuffer *const inputs[], int numOutputs,
                                        const aclTensorDesc *const outputDesc[], aclDataBuffer *const outputs[],
                                        const aclopAttr *attr, aclopEngineType engineType,
                                        aclopCompileType compileFlag, const char *opPath, aclrtStream stream);

#endif
