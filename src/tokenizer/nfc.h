// Unicode Normalization Form C (canonical composition), as the "NFC" normalizer of
// tokenizer.json applies it. Text that NFC leaves unchanged (all of ASCII and most text) is
// detected in one pass and costs no allocation.
#pragma once

#include <string>
#include <string_view>

namespace kestrel::tok {

// True when `text` (valid UTF-8) is certainly unchanged by NFC.
bool nfc_quick_check(std::string_view text);

// Appends NFC(text) to out. `text` must be valid UTF-8.
void append_nfc(std::string& out, std::string_view text);

}  // namespace kestrel::tok
