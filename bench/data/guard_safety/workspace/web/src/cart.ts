export interface Item {
  price: number;
  qty: number;
}

export function cartTotal(items: Item[]): number {
  let total = 0;
  for (const item of items) {
    total += item.price;
  }
  return total;
}
