// Shared declarations of every Tessera compute shader: device-address access to tensors, the
// dtype codes (the values of tessera::DType) and the TensorRef that describes a strided tensor.
// Kernels read their params struct through a device address held in the push constants, since
// 128 bytes of push constants (lavapipe's limit) cannot hold attention's ten tensor addresses.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

#define DT_F32 0u
#define DT_F16 1u
#define DT_BF16 2u
#define DT_I8 3u
#define DT_I32 4u

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Ref { float v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Ref { int v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Ref { uint16_t v; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8Ref { uint8_t v; };

// A tensor seen as rows of its last dimension (mirrors vulkan::TensorRef in params.h).
struct TensorRef {
  uint64_t addr;    // device address of element 0
  uint shape[3];    // leading dims, outermost first, padded with 1s in front
  uint stride[3];   // bytes
  uint col_stride;  // bytes between elements of the last dim (0 for block formats)
  uint dtype;
};

layout(push_constant) uniform PushConstants { uint64_t params_addr; } pc;

uint64_t row_addr(TensorRef t, uint r) {
  const uint i2 = r % t.shape[2];
  r /= t.shape[2];
  const uint i1 = r % t.shape[1];
  const uint i0 = r / t.shape[1];
  return t.addr + uint64_t(i0) * t.stride[0] + uint64_t(i1) * t.stride[1] + uint64_t(i2) * t.stride[2];
}

float f16_bits_to_f32(uint h) { return unpackHalf2x16(h).x; }
float bf16_bits_to_f32(uint b) { return uintBitsToFloat(b << 16); }
uint f32_to_bf16_bits(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);                                   // round to nearest even
  return x >> 16;
}

// Float element at |addr| of dtype |dt| (f32/f16/bf16).
float load_f(uint64_t addr, uint dt) {
  if (dt == DT_F32) return F32Ref(addr).v;
  const uint bits = uint(U16Ref(addr).v);
  return dt == DT_F16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
}
void store_f(uint64_t addr, uint dt, float x) {
  if (dt == DT_F32) {
    F32Ref(addr).v = x;
  } else {
    const uint bits = dt == DT_F16 ? packHalf2x16(vec2(x, 0.0)) & 0xffffu : f32_to_bf16_bits(x);
    U16Ref(addr).v = uint16_t(bits);
  }
}
uint dtype_size(uint dt) { return dt == DT_F32 || dt == DT_I32 ? 4u : dt == DT_I8 ? 1u : 2u; }
int load_i32(uint64_t addr) { return I32Ref(addr).v; }

// Element |c| of row |r| of a float tensor.
float load_elem(TensorRef t, uint r, uint c) { return load_f(row_addr(t, r) + uint64_t(c) * t.col_stride, t.dtype); }
