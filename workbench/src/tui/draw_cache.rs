//! A value built while drawing and kept until what it was built from changes. Screens draw
//! through a shared `&App`, so the cache sits in a `RefCell`: filling it changes nothing the
//! user sees.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

/// The value last built and the key it was built from.
pub struct DrawCache<K, V>(RefCell<Option<(K, Rc<V>)>>);

impl<K: PartialEq, V> DrawCache<K, V> {
    /// The value for `key`: the cached one when it was built from an equal key, else `build()`.
    pub fn get(&self, key: K, build: impl FnOnce() -> V) -> Rc<V> {
        let mut cache = self.0.borrow_mut();
        match cache.as_ref() {
            Some((cached, value)) if *cached == key => value.clone(),
            _ => {
                let value = Rc::new(build());
                *cache = Some((key, value.clone()));
                value
            }
        }
    }
}

impl<K, V> Default for DrawCache<K, V> {
    fn default() -> Self {
        Self(RefCell::new(None))
    }
}

impl<K: Clone, V> Clone for DrawCache<K, V> {
    fn clone(&self) -> Self {
        Self(RefCell::new(self.0.borrow().clone()))
    }
}

impl<K, V> fmt::Debug for DrawCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.borrow().is_some() { "DrawCache(filled)" } else { "DrawCache(empty)" })
    }
}

#[cfg(test)]
mod tests {
    use super::DrawCache;
    use std::cell::Cell;

    #[test]
    fn builds_again_only_when_the_key_changes() {
        let cache = DrawCache::default();
        let builds = Cell::new(0);
        let build = |v: i32| {
            builds.set(builds.get() + 1);
            v
        };
        assert_eq!(*cache.get(1, || build(10)), 10);
        assert_eq!(*cache.get(1, || build(20)), 10, "same key: the cached value");
        assert_eq!(builds.get(), 1);
        assert_eq!(*cache.get(2, || build(30)), 30, "new key: built again");
        assert_eq!(builds.get(), 2);
    }
}
