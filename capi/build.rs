//! Gives libopenib.so its SONAME, so programs linked against it record `libopenib.so`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libopenib.so");
}
