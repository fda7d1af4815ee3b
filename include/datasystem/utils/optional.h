/* A value that may be absent, as Yuanrong's SDK returns from gets. Holds the
 * value in place (T must be default-constructible); operator bool says
 * whether it was set. */
#ifndef DATASYSTEM_CPP_UTILS_OPTIONAL_H
#define DATASYSTEM_CPP_UTILS_OPTIONAL_H

#include <utility>

namespace datasystem
{

template <typename T> class Optional
{
  public:
    constexpr Optional() = default;
    Optional(const Optional &) = default;
    Optional &operator=(const Optional &) = default;
    Optional(Optional &&other) noexcept = default;
    Optional &operator=(Optional &&) noexcept = default;
    template <typename... Args>
    explicit Optional(Args &&...args) : init_(true), val_(std::forward<Args>(args)...)
    {
    }
    ~Optional() = default;

    explicit operator bool() const noexcept
    {
        return init_;
    }
    T &value()
    {
        return val_;
    }
    const T &value() const
    {
        return val_;
    }
    T *operator->()
    {
        return &val_;
    }
    const T *operator->() const
    {
        return &val_;
    }
    T &operator*()
    {
        return val_;
    }
    const T &operator*() const
    {
        return val_;
    }

  private:
    bool init_ = false;
    T val_{};
};

} // namespace datasystem

#endif
