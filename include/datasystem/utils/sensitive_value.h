/* A secret (token, private key): owned bytes that are wiped when released. */
#ifndef DATASYSTEM_CPP_UTILS_SENSITIVE_VALUE_H
#define DATASYSTEM_CPP_UTILS_SENSITIVE_VALUE_H

#include <cstddef>
#include <memory>
#include <string>

#include "datasystem/utils/status.h"

namespace datasystem
{

class DS_CPP_API SensitiveValue
{
  public:
    SensitiveValue() = default;
    SensitiveValue(const char *str);
    SensitiveValue(const std::string &str);
    SensitiveValue(const char *str, size_t size);
    SensitiveValue(std::unique_ptr<char[]> data, size_t size);
    SensitiveValue(SensitiveValue &&other) noexcept;
    SensitiveValue(const SensitiveValue &other);
    ~SensitiveValue();
    SensitiveValue &operator=(const SensitiveValue &other);
    SensitiveValue &operator=(SensitiveValue &&other) noexcept;
    SensitiveValue &operator=(const char *str);
    SensitiveValue &operator=(const std::string &str);
    bool operator==(const SensitiveValue &other) const;

    bool Empty() const;
    /* NUL-terminated; "" when empty. */
    const char *GetData() const;
    size_t GetSize() const;
    /* Hands the bytes over and leaves this empty; false when it was empty. */
    bool MoveTo(std::unique_ptr<char[]> &outData, size_t &outSize);
    void Clear();

  private:
    void SetData(const char *str, size_t size);
    std::unique_ptr<char[]> data_ = nullptr;
    size_t size_ = 0;
};

} // namespace datasystem

#endif
