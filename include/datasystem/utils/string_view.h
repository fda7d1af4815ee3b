/* A non-owning view of bytes (pointer and length), accepted wherever a value
 * is passed in: std::string, string literals and (pointer, length) convert. */
#ifndef DATASYSTEM_CPP_UTILS_STRING_VIEW_H
#define DATASYSTEM_CPP_UTILS_STRING_VIEW_H

#include <cstddef>
#include <cstring>
#include <string>

namespace datasystem
{

class StringView
{
  public:
    constexpr StringView() noexcept = default;
    constexpr StringView(const StringView &) noexcept = default;
    StringView(const char *str) : str_(str), len_(str == nullptr ? 0 : std::strlen(str)) {}
    constexpr StringView(const char *str, size_t len) : str_(str), len_(len) {}
    StringView(const std::string &str) : str_(str.data()), len_(str.size()) {}
    constexpr StringView &operator=(const StringView &) noexcept = default;
    ~StringView() = default;

    constexpr const char *data() const noexcept
    {
        return str_;
    }
    constexpr size_t size() const noexcept
    {
        return len_;
    }
    constexpr bool empty() const noexcept
    {
        return len_ == 0;
    }

  private:
    const char *str_ = nullptr;
    size_t len_ = 0;
};

} // namespace datasystem

#endif
