#ifndef SETTEE_CCRYPT_SHIM_H
#define SETTEE_CCRYPT_SHIM_H

// libxcrypt (Debian's libcrypt-dev): bcrypt ("$2b$") hashing for the sync gateway's user passwords,
// through the reentrant crypt_r / crypt_gensalt_rn only.
#include <crypt.h>

#endif
