//! Unaligned AVX2 loads and stores over length-checked slices, for the byte kernels
//! ([`super::binner`], [`super::bytes`]).
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_ps(s: &[f32]) -> std::arch::x86_64::__m256 {
    let s: &[f32; 8] = s.try_into().expect("8 floats");
    // SAFETY: `s` is eight readable floats; the load is unaligned.
    unsafe { std::arch::x86_64::_mm256_loadu_ps(s.as_ptr()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_256(s: &[u8]) -> std::arch::x86_64::__m256i {
    let s: &[u8; 32] = s.try_into().expect("32 bytes");
    // SAFETY: `s` is 32 readable bytes; the load is unaligned.
    unsafe { std::arch::x86_64::_mm256_loadu_si256(s.as_ptr().cast()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_128(s: &[u8]) -> std::arch::x86_64::__m128i {
    let s: &[u8; 16] = s.try_into().expect("16 bytes");
    // SAFETY: `s` is 16 readable bytes; the load is unaligned.
    unsafe { std::arch::x86_64::_mm_loadu_si128(s.as_ptr().cast()) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn store_256(d: &mut [u8], v: std::arch::x86_64::__m256i) {
    let d: &mut [u8; 32] = d.try_into().expect("32 bytes");
    // SAFETY: `d` is 32 writable bytes; the store is unaligned.
    unsafe { std::arch::x86_64::_mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
}
