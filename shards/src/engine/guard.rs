//! Guard expression language. (Being written.)
