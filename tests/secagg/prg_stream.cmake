# test_prg_stream checks libgcrypt's streaming PRG against OpenSSL's where libgcrypt is built
# in (crypto.h: fl__sa_prg_open_gcrypt).
if(TARGET test_prg_stream AND GCRYPT_FOUND)
  target_compile_definitions(test_prg_stream PRIVATE FL_HAVE_GCRYPT)
endif()
