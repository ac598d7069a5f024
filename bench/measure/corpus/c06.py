import typing, enum, abc
class Color(enum.Enum):
    RED = 1
    GREEN = 2
class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self) -> float: ...
class Sq(Shape):
    def __init__(self, s: float) -> None: self.s = s
    def area(self) -> float: return self.s ** 2
def total(xs: typing.List[Shape]) -> float: return sum(x.area() for x in xs)
print(Color.GREEN.name, total([Sq(2), Sq(3)]), typing.get_type_hints(total))
