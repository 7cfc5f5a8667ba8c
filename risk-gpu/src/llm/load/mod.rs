//! Loading a [`Llama`](super::model::Llama): a GGUF file ([`gguf`]) or a Hugging Face /
//! AutoAWQ checkpoint directory ([`safetensors`], INT4 tensors read by [`awq`]); both
//! bound every size the file states ([`super::limits`]) before reading a tensor, and
//! build the model through one shape check ([`assemble`]).

mod assemble;
mod awq;
mod gguf;
mod safetensors;

pub(crate) use safetensors::interleave_perm;
