//! Machine definitions. (Being written.)
#[derive(Debug, Clone)]
pub struct Definition;
#[derive(Debug, Clone)]
pub struct CompiledMachine;
