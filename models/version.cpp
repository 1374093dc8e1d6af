#include "models/version.h"

namespace tessera {

const char* version_string() { return TESSERA_VERSION_STRING; }

}  // namespace tessera
