//! Integration tests of the model backends against reference outputs written by
//! `tools/train_xgboost.py` (xgboost 3.x) and the committed ONNX models.

mod bert;
mod common;
mod config_file;
mod fuzz_seeds;
mod layers;
mod llm;
mod llm_limits;
mod onnx;
mod onnx_seq;
mod quant;
mod remote;
mod trees;
mod trees_bad_input;
mod trees_explain;
mod trees_lightgbm;
mod trees_lightgbm_dump;
mod trees_multiclass;
mod trees_ubjson;
mod trees_xgb_variants;
